// Unit tests of the dashboard's pure modules (no browser, no server): the event-stream
// parser and the start-run form's validation.
//
//   node --test tests/web/unit.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { SseParser, backoffMs } from '../../web/js/sse.js';
import { fieldOfServerMessage, validateRun, DEFAULTS } from '../../web/js/run-form.js';

test('sse: events split across chunks at every byte are parsed the same', () => {
  const wire = ': keep-alive\n\nid: 41\nevent: round_started\ndata: {"id":41,"kind":"round_started"}\n\n'
    + 'id: 42\r\nevent: round_committed\r\ndata: {"id":42,\r\ndata: "kind":"round_committed"}\r\n\r\n';
  const whole = new SseParser().push(wire);
  assert.deepEqual(whole, [
    { id: '41', event: 'round_started', data: '{"id":41,"kind":"round_started"}' },
    { id: '42', event: 'round_committed', data: '{"id":42,\n"kind":"round_committed"}' },
  ]);
  for (let cut = 0; cut <= wire.length; cut += 1) {
    const parser = new SseParser();
    const got = [...parser.push(wire.slice(0, cut)), ...parser.push(wire.slice(cut))];
    assert.deepEqual(got, whole, `cut at ${cut}`);
  }
  // One character at a time, CR and LF in separate chunks included.
  const parser = new SseParser();
  const got = [...wire].flatMap((c) => parser.push(c));
  assert.deepEqual(got, whole);
});

test('sse: comments, bare CR line ends, no space after the colon, unknown fields', () => {
  const parser = new SseParser();
  const got = parser.push(':comment\rdata:one\rretry: 10\rfoo: bar\r\rdata\r\r');
  assert.deepEqual(got, [{ id: '', event: 'message', data: 'one' }, { id: '', event: 'message', data: '' }]);
});

test('sse: an event without data is not dispatched; the id carries over', () => {
  const parser = new SseParser();
  assert.deepEqual(parser.push('id: 7\nevent: x\n\n'), []);
  assert.deepEqual(parser.push('data: y\n\n'), [{ id: '7', event: 'message', data: 'y' }]);
});

test('sse: an incomplete event waits for its blank line', () => {
  const parser = new SseParser();
  assert.deepEqual(parser.push('data: {"a":1}\n'), []);
  assert.deepEqual(parser.push('\n'), [{ id: '', event: 'message', data: '{"a":1}' }]);
});

test('backoff: doubles from 1 s, caps at 30 s, jitter within +-20 %', () => {
  assert.equal(backoffMs(1, () => 0.5), 1000);
  assert.equal(backoffMs(2, () => 0.5), 2000);
  assert.equal(backoffMs(5, () => 0.5), 16000);
  assert.equal(backoffMs(20, () => 0.5), 30000);
  assert.equal(backoffMs(1, () => 0), 800);
  assert.equal(backoffMs(1, () => 1), 1200);
});

const valid = { ...DEFAULTS, name: 'demo' };

test('run form: the defaults with a name make the documented config', () => {
  const { errors, config } = validateRun(valid);
  assert.deepEqual(errors, {});
  assert.deepEqual(config, {
    name: 'demo', model: { type: 'logreg' }, rounds: 10, clients_per_round: 3, min_clients: 2,
    local_epochs: 1, batch_size: 32, optimizer: { kind: 'sgd', lr: 0.05 }, round_timeout_s: 60,
    seed: 1, federated_evaluation: true, manual: false,
  });
});

test('run form: every field is checked, with a message naming the problem', () => {
  const cases = [
    [{ name: '  ' }, 'name', /name/i],
    [{ name: 'x'.repeat(129) }, 'name', /128/],
    [{ model: 'resnet' }, 'model', /logreg, mlp or cnn/],
    [{ model: 'mlp', hidden: '' }, 'hidden', /at least one/],
    [{ model: 'mlp', hidden: '64, 0' }, 'hidden', /between 1 and 65,536/],
    [{ model: 'mlp', hidden: Array(17).fill('8').join(',') }, 'hidden', /16/],
    [{ rounds: '0' }, 'rounds', /between 1 and 100,000/],
    [{ rounds: '2.5' }, 'rounds', /whole number/],
    [{ rounds: '' }, 'rounds', /required/],
    [{ rounds: '100001' }, 'rounds', /100,000/],
    [{ clients_per_round: 'three' }, 'clients_per_round', /whole number/],
    [{ min_clients: '4', clients_per_round: '3' }, 'min_clients', /cannot exceed/],
    [{ local_epochs: '1001' }, 'local_epochs', /1,000/],
    [{ batch_size: '0' }, 'batch_size', /between 1/],
    [{ optimizer: 'rmsprop' }, 'optimizer', /SGD or Adam/],
    [{ lr: '0' }, 'lr', /greater than 0/],
    [{ lr: '-1' }, 'lr', /greater than 0/],
    [{ lr: 'fast' }, 'lr', /number/],
    [{ lr: '101' }, 'lr', /at most 100/],
    [{ round_timeout_s: '0.05' }, 'round_timeout_s', /at least 0.1/],
    [{ round_timeout_s: '86401' }, 'round_timeout_s', /86400/],
    [{ seed: '-1' }, 'seed', /whole number/],
    [{ seed: '9000000000000001' }, 'seed', /between 0/],
  ];
  for (const [change, field, message] of cases) {
    const { errors, config } = validateRun({ ...valid, ...change });
    assert.equal(config, null, JSON.stringify(change));
    assert.deepEqual(Object.keys(errors), [field], JSON.stringify(change));
    assert.match(errors[field], message, JSON.stringify(change));
  }
});

test('run form: mlp widths, adam, manual, scientific notation', () => {
  const { config } = validateRun({ ...valid, model: 'mlp', hidden: '128 , 64,32', optimizer: 'adam',
    lr: '1e-3', manual: true, federated_evaluation: false, round_timeout_s: '0.5' });
  assert.deepEqual(config.model, { type: 'mlp', hidden: [128, 64, 32] });
  assert.deepEqual(config.optimizer, { kind: 'adam', lr: 0.001 });
  assert.equal(config.manual, true);
  assert.equal(config.federated_evaluation, false);
  assert.equal(config.round_timeout_s, 0.5);
  // hidden is ignored unless the model is an mlp
  assert.deepEqual(validateRun({ ...valid, hidden: 'junk' }).config.model, { type: 'logreg' });
});

test('run form: a server message is mapped to the field it names', () => {
  assert.equal(fieldOfServerMessage("run config: 'rounds' must be an integer in [1, 100000], got 0"), 'rounds');
  assert.equal(fieldOfServerMessage("run config: optimizer: 'lr' must be positive"), 'lr');
  assert.equal(fieldOfServerMessage("run config: model: unknown 'type' \"x\""), 'model');
  assert.equal(fieldOfServerMessage('rounds: must be an integer in [1, 100000], got "x"'), 'rounds');
  assert.equal(fieldOfServerMessage('run 3 is active'), null);
});
