// Start a run: a form validated in the browser (run-form.js) before POST /api/v1/runs.
// A refusal from the server (400 naming the field, 409 while another run is active) is
// shown at the top of the form, and next to the field it names.

import { api } from '../api.js';
import { fill, h, setTitle } from '../dom.js';
import { DEFAULTS, LABELS, fieldOfServerMessage, validateRun } from '../run-form.js';

export function mount(root, ctx) {
  setTitle('Start a run');
  const controls = {};
  const errorsOf = {};

  // A labelled control with a help text and an error slot, wired for screen readers.
  const field = (name, label, control, help) => {
    control.id = `f-${name}`;
    control.name = name;
    controls[name] = control;
    const helpId = `f-${name}-help`;
    const errorId = `f-${name}-error`;
    errorsOf[name] = h(`p.field-error#${errorId}`);
    control.setAttribute('aria-describedby', help ? `${helpId} ${errorId}` : errorId);
    return h('div.field', { dataset: { field: name } },
      h('label', { for: control.id }, label), control,
      help ? h(`p.help#${helpId}`, help) : null, errorsOf[name]);
  };
  const text = (value, attrs = {}) => h('input', { type: 'text', value, autocomplete: 'off', ...attrs });
  const numberInput = (value, attrs = {}) => h('input', { type: 'text', inputmode: 'numeric', value, autocomplete: 'off', ...attrs });
  const decimalInput = (value, attrs = {}) => h('input', { type: 'text', inputmode: 'decimal', value, autocomplete: 'off', ...attrs });
  const select = (value, options) => h('select', {}, options.map(([v, label]) => h('option', { value: v, selected: v === value }, label)));
  const check = (checked) => h('input', { type: 'checkbox', checked });

  const online = h('p.help#online-hint', 'Checking how many clients are online…');
  const hiddenField = field('hidden', 'Hidden layers', text(DEFAULTS.hidden),
    'Widths of the MLP’s hidden layers, comma separated.');
  const summary = h('div.error-summary#form-errors', { tabindex: '-1', hidden: true, role: 'alert' });
  const submit = h('button.btn.btn-primary#start-run', { type: 'submit' }, 'Start run');

  const form = h('form.panel.run-form#run-form', { novalidate: true, 'aria-labelledby': 'new-run-title' },
    summary,
    h('fieldset', h('legend', 'Run'),
      field('name', 'Name', text(DEFAULTS.name, { maxlength: '128', placeholder: 'breast-cancer-fedavg' }),
        'Shown in lists and charts. Up to 128 characters.'),
      h('div.field.check', { dataset: { field: 'manual' } },
        (() => { const c = check(DEFAULTS.manual); c.id = 'f-manual'; c.name = 'manual'; controls.manual = c; return c; })(),
        h('label', { for: 'f-manual' }, 'Manual rounds'),
        h('p.help', 'Each round waits for an admin to press “Start next round”.')),
      h('div.field.check', { dataset: { field: 'federated_evaluation' } },
        (() => { const c = check(DEFAULTS.federated_evaluation); c.id = 'f-federated_evaluation'; c.name = 'federated_evaluation'; controls.federated_evaluation = c; return c; })(),
        h('label', { for: 'f-federated_evaluation' }, 'Federated evaluation'),
        h('p.help', 'Clients evaluate every new global model on their local test split.'))),
    h('fieldset', h('legend', 'Model'),
      field('model', 'Type', select(DEFAULTS.model, [
        ['logreg', 'logreg — logistic regression'], ['mlp', 'mlp — multilayer perceptron'], ['cnn', 'cnn — two-layer CNN (images)'],
      ]), 'Input shape and classes come from the clients’ data.'),
      hiddenField),
    h('fieldset', h('legend', 'Rounds'),
      h('div.field-grid',
        field('rounds', 'Rounds', numberInput(DEFAULTS.rounds), '1 to 100,000.'),
        field('clients_per_round', 'Clients per round', numberInput(DEFAULTS.clients_per_round), online),
        field('min_clients', 'Minimum clients', numberInput(DEFAULTS.min_clients), 'Quorum: a round fails with fewer updates.'),
        field('round_timeout_s', 'Round timeout (s)', decimalInput(DEFAULTS.round_timeout_s), '0.1 to 86,400 seconds.'))),
    h('fieldset', h('legend', 'Local training'),
      h('div.field-grid',
        field('local_epochs', 'Local epochs', numberInput(DEFAULTS.local_epochs), '1 to 1,000.'),
        field('batch_size', 'Batch size', numberInput(DEFAULTS.batch_size), '1 to 65,536.'),
        field('optimizer', 'Optimizer', select(DEFAULTS.optimizer, [['sgd', 'SGD'], ['adam', 'Adam']])),
        field('lr', 'Learning rate', decimalInput(DEFAULTS.lr), 'Greater than 0, at most 100.'),
        field('seed', 'Seed', numberInput(DEFAULTS.seed), 'Client sampling and initialisation; same seed, same run.'))),
    h('div.actions', submit, h('a.btn', { href: '#/runs' }, 'Cancel')));

  root.append(h('div.page-head', h('h1#new-run-title', 'Start a run')), form);

  const syncModel = () => { hiddenField.hidden = controls.model.value !== 'mlp'; };
  controls.model.addEventListener('change', syncModel);
  syncModel();

  const values = () => {
    const v = {};
    for (const [k, c] of Object.entries(controls)) v[k] = c.type === 'checkbox' ? c.checked : c.value;
    return v;
  };

  const showErrors = (errors, heading) => {
    for (const [name, slot] of Object.entries(errorsOf)) {
      slot.textContent = errors[name] || '';
      if (errors[name]) controls[name].setAttribute('aria-invalid', 'true');
      else controls[name].removeAttribute('aria-invalid');
    }
    const names = Object.keys(errors);
    if (names.length === 0 && !heading) {
      summary.hidden = true;
      summary.replaceChildren();
      return;
    }
    fill(summary,
      h('h2', heading || `Fix ${names.length === 1 ? 'this' : `these ${names.length}`} before starting the run`),
      names.length ? h('ul', names.map((n) => h('li', h('a', {
        href: `#/runs/new`,
        onclick: (e) => { e.preventDefault(); controls[n].focus(); },
      }, `${LABELS[n] || n}: ${errors[n]}`)))) : null);
    summary.hidden = false;
  };

  let attempted = false;
  form.addEventListener('input', () => { if (attempted) showErrors(validateRun(values()).errors); });
  form.addEventListener('change', () => { if (attempted) showErrors(validateRun(values()).errors); });

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    attempted = true;
    const { errors, config } = validateRun(values());
    showErrors(errors);
    if (!config) {
      summary.focus();
      return;
    }
    submit.disabled = true;
    submit.textContent = 'Starting…';
    try {
      const run = await api.startRun(config);
      if (ctx.alive) ctx.navigate(`/runs/${run.id}`);
    } catch (e) {
      if (!ctx.alive || e.status === 401) return;
      const where = fieldOfServerMessage(e.message);
      const heading = e.status === 409
        ? 'The server cannot start this run now'
        : (e.status === 400 ? 'The server refused this run' : 'The run was not started');
      fill(summary, h('h2', heading), h('p#server-error', e.message));
      summary.hidden = false;
      if (where && errorsOf[where]) {
        errorsOf[where].textContent = e.message;
        controls[where].setAttribute('aria-invalid', 'true');
      }
      summary.focus();
    } finally {
      submit.disabled = false;
      submit.textContent = 'Start run';
    }
  });

  api.clients({ limit: 500 }).then((page) => {
    if (!ctx.alive) return;
    const n = page.items.filter((c) => c.online).length;
    online.textContent = `${n} client${n === 1 ? ' is' : 's are'} online now. A round waits for clients if fewer are connected.`;
    online.dataset.online = String(n);
  }, () => { if (ctx.alive) online.textContent = 'How many clients each round samples.'; });
  controls.name.focus();
}
