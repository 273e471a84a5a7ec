// One run: its state and progress, accuracy and loss per round (server and federated
// evaluation), participation per round, the per-client results of a chosen round, the
// federated evaluation (its curve per round and each client's answer for the chosen round),
// and the admin actions (stop; next round for manual runs; model download). Live events
// for this run reload the rounds, so the charts gain points without reloading the page.

import { api } from '../api.js';
import { coalesce } from '../events.js';
import { badge, fill, h, setTitle, stat, table } from '../dom.js';
import { ago, bytes, clock, compact, dash, dateTime, shortDateTime, metric, number, percent, seconds } from '../format.js';
import { evaluationBadge, resultBadge, roundBadge, runActive, runBadge } from '../describe.js';
import { ParticipationChart, RoundLineChart, chartAvailable } from '../charts.js';

export function mount(root, ctx) {
  const id = Number(ctx.params.id);
  setTitle(`Run ${id}`);
  let run = null;
  let rounds = [];
  let evaluation = [];  // GET .../evaluation items: the evaluated rounds' means and counts
  let info = null;
  let selected = ctx.query.has('round') ? Number(ctx.query.get('round')) : null;
  let followLatest = selected === null;
  let live = null;  // {round, accepted, rejected, stale} of the round in flight, from events
  const charts = [];

  // --- skeleton --------------------------------------------------------------------
  const title = h('h1#run-title', `Run ${id}`);
  const stateBox = h('span#run-state');
  const actionMsg = h('div#action-message', { role: 'status', 'aria-live': 'polite' });
  const actions = h('div.actions#run-actions');
  const summary = h('div.stat-grid#run-summary', { 'aria-busy': 'true' });
  const flight = h('p.notice#round-in-flight', { hidden: true, role: 'status' });
  const figure = (key, heading, note) => h('figure.chart-card', { dataset: { chart: key, points: '0' } },
    h('figcaption', h('span.chart-title', heading), note ? h('span.muted', note) : null),
    h('div.chart-box', h('canvas', { role: 'img', 'aria-label': `${heading}: no rounds yet` })));
  const accFigure = figure('accuracy', 'Accuracy per round', 'higher is better');
  const lossFigure = figure('loss', 'Loss per round', 'lower is better');
  const partFigure = figure('participation', 'Participation per round', 'clients per attempt');
  const fedFigure = figure('federated', 'Federated evaluation per round', 'the new model on the sites\' test splits');
  const fedRoundsBox = h('div#evaluation-rounds');
  const fedClientsBox = h('div#evaluation-table');
  const fedMeta = h('p.muted#evaluation-meta');
  const roundsBox = h('div#rounds-table');
  const roundSelect = h('select#round-select', { disabled: true });
  const resultsBox = h('div#results-table');
  const roundMeta = h('p.muted#round-meta');
  const configBox = h('dl.config#run-config');
  const downloadFormat = h('select#model-format', {},
    h('option', { value: 'npy' }, '.npy (NumPy)'), h('option', { value: 'fcp' }, '.fcp (Fedcore)'));
  const downloadButton = h('button.btn#download-model', { type: 'button', disabled: true }, 'Download model');

  root.append(
    h('nav.crumbs', { 'aria-label': 'Breadcrumb' }, h('a', { href: '#/runs' }, 'Runs'), ' / ', `Run ${id}`),
    h('div.page-head', h('div.title-row', title, stateBox), actions),
    actionMsg, summary, flight,
    h('div.chart-grid', accFigure, lossFigure, partFigure),
    h('section.panel', { 'aria-labelledby': 'round-details-title' },
      h('div.panel-head', h('h2#round-details-title', 'Clients in a round'),
        h('div.toolbar', h('label', { for: 'round-select' }, 'Round'), roundSelect)),
      roundMeta, resultsBox,
      h('div.toolbar.download',
        h('label', { for: 'model-format' }, 'Global model after this round'), downloadFormat, downloadButton)),
    h('section.panel#federated-evaluation', { 'aria-labelledby': 'evaluation-title' },
      h('div.panel-head', h('h2#evaluation-title', 'Federated evaluation')),
      h('p.muted', 'After a round is aggregated, its participants evaluate the new global model on their own test splits; the last round\'s model is evaluated by every client that took part in the run. Means are weighted by test samples.'),
      h('div.chart-grid', fedFigure, fedRoundsBox),
      h('h3#evaluation-clients-title', 'Clients in the selected round'), fedMeta, fedClientsBox),
    h('section.panel', { 'aria-labelledby': 'rounds-title' }, h('h2#rounds-title', 'Rounds'), roundsBox),
    h('section.panel', { 'aria-labelledby': 'config-title' }, h('h2#config-title', 'Configuration'), configBox));

  if (chartAvailable()) {
    const pick = (round) => selectRound(Number(round), true);
    charts.push(new RoundLineChart(accFigure.querySelector('canvas'), {
      yTitle: 'accuracy', yMin: 0, yMax: 1, onPick: pick,
      series: [
        { key: 'eval_accuracy', label: 'server eval', color: '--series-1' },
        { key: 'fed_eval_accuracy', label: 'federated eval', color: '--series-2' },
        { key: 'train_accuracy', label: 'training', color: '--series-3', dash: true },
      ],
      describe: (rows) => describeMetric('Accuracy', rows, ['eval_accuracy', 'fed_eval_accuracy'], percent),
    }));
    charts.push(new RoundLineChart(lossFigure.querySelector('canvas'), {
      yTitle: 'loss', onPick: pick,
      series: [
        { key: 'eval_loss', label: 'server eval', color: '--series-1' },
        { key: 'fed_eval_loss', label: 'federated eval', color: '--series-2' },
        { key: 'train_loss', label: 'training', color: '--series-3', dash: true },
      ],
      describe: (rows) => describeMetric('Loss', rows, ['eval_loss', 'fed_eval_loss'], (v) => metric(v)),
    }));
    charts.push(new ParticipationChart(partFigure.querySelector('canvas'), { onPick: pick }));
    charts.push(new RoundLineChart(fedFigure.querySelector('canvas'), {
      yTitle: 'accuracy', yMin: 0, yMax: 1, onPick: pick,
      series: [{ key: 'accuracy', label: 'federated accuracy (weighted mean)', color: '--series-2' }],
      describe: (rows) => describeMetric('Federated accuracy', rows, ['accuracy'], percent),
    }));
    ctx.cleanup(() => charts.forEach((c) => c.destroy()));
  } else {
    for (const f of [accFigure, lossFigure, partFigure, fedFigure]) {
      fill(f.querySelector('.chart-box'), h('p.muted', 'Charts need web/node_modules (run npm ci in web/). The tables below have the same numbers.'));
    }
  }

  function describeMetric(name, rows, keys, fmt) {
    if (rows.length === 0) return `${name} per round: no rounds yet`;
    const last = rows[rows.length - 1];
    const parts = keys.filter((k) => Number.isFinite(last[k])).map((k) => `${k.replaceAll('_', ' ')} ${fmt(last[k])}`);
    return `${name} over ${rows.length} round(s); round ${last.round}: ${parts.join(', ') || 'no evaluation'}`;
  }

  // --- rendering -------------------------------------------------------------------
  const committed = () => rounds.filter((r) => r.state === 'committed');
  const lastOf = (key) => {
    const c = committed().filter((r) => Number.isFinite(r[key]));
    return c.length ? c[c.length - 1][key] : null;
  };
  const activeHere = () => info && info.run_active && info.active_run_id === id;

  let confirming = false;  // the stop confirmation is open: live reloads must keep it

  function renderHeader() {
    title.textContent = run.name || `Run ${id}`;
    setTitle(run.name || `Run ${id}`);
    fill(stateBox, runBadge(run.state), run.manual ? badge('manual', 'neutral') : null);
    if (!runActive(run)) confirming = false;
    if (confirming) {
      if (!actions.querySelector('#confirm-stop')) {
        fill(actions,
          h('span.confirm-text', 'Stop this run? The round in flight is abandoned; committed rounds are kept.'),
          h('button.btn.btn-danger#confirm-stop', { type: 'button', onclick: stopRun }, 'Yes, stop it'),
          h('button.btn#cancel-stop', { type: 'button', onclick: cancelStop }, 'Cancel'));
      }
      return;
    }
    const buttons = [];
    if (run.manual && runActive(run)) {
      const waiting = activeHere() && info.waiting_for_admin;
      buttons.push(h('button.btn.btn-primary#next-round', {
        type: 'button', onclick: nextRound,
        disabled: activeHere() && !waiting,
        title: waiting || !activeHere() ? 'Start the next round now' : 'A round is in flight',
      }, 'Start next round'));
    }
    if (runActive(run)) {
      buttons.push(h('button.btn.btn-danger#stop-run', { type: 'button', onclick: confirmStop }, 'Stop run'));
    }
    fill(actions, buttons);
  }

  function renderSummary() {
    const done = run.last_round || 0;
    const inFlight = activeHere() && info.active_round ? info.active_round : null;
    const fedAcc = lastOf('fed_eval_accuracy');
    const srvAcc = lastOf('eval_accuracy');
    fill(summary,
      stat('Progress', h('span', h('progress#run-progress', { max: run.rounds_total, value: done, 'aria-label': 'rounds committed' }),
        h('span#run-progress-text', ` ${done} / ${run.rounds_total}`)),
      { hint: inFlight ? `round ${inFlight} in flight` : (runActive(run) ? 'between rounds' : `ended ${ago(run.updated_ms)}`) }),
      stat('Server accuracy', percent(srvAcc), { hint: srvAcc === null ? 'no server test set' : `loss ${metric(lastOf('eval_loss'))}` }),
      stat('Federated accuracy', percent(fedAcc), { hint: fedAcc === null ? 'not reported' : `loss ${metric(lastOf('fed_eval_loss'))}` }),
      stat('Model', run.config?.model?.type ?? dash, { hint: `${run.config?.strategy ?? 'fedavg'} · ${run.manual ? 'manual rounds' : 'automatic rounds'}` }),
      privacyStat(),
      stat('Started', h('time', { title: dateTime(run.created_ms) }, shortDateTime(run.created_ms)),
        { hint: `updated ${ago(run.updated_ms)}` }));
    summary.removeAttribute('aria-busy');
    if (run.reason) {
      summary.append(h('p.notice.span-all', { dataset: { kind: run.state === 'failed' ? 'bad' : 'info' } }, `Reason: ${run.reason}`));
    }
  }

  // The run's privacy: secure aggregation, and the DP budget spent of the stated one.
  function privacyStat() {
    const privacy = run.config?.privacy ?? {};
    const dp = privacy.dp;
    const secure = privacy.secure_aggregation ? 'secure aggregation' : 'updates in the clear';
    if (!dp || dp.mode === 'none') {
      return stat('Privacy', privacy.secure_aggregation ? 'SecAgg+' : 'none', { hint: `${secure} · no DP budget`, id: 'run-privacy' });
    }
    const spent = lastOf('epsilon');
    const text = `ε ${spent === null ? '0' : spent.toFixed(2)} / ${dp.epsilon}`;
    return stat('Privacy budget', text, { hint: `${dp.mode} DP, δ ${dp.delta} · ${secure}`, id: 'run-privacy' });
  }

  function renderFlight() {
    const inFlight = activeHere() && info.active_round ? info.active_round : null;
    if (inFlight && runActive(run)) {
      const counts = live && live.round === inFlight
        ? ` · ${live.accepted} update(s) accepted, ${live.rejected} rejected so far` : '';
      flight.textContent = `Round ${inFlight} is in flight${counts}.`;
      flight.hidden = false;
    } else if (activeHere() && info.waiting_for_admin) {
      flight.textContent = 'Waiting for an admin: press “Start next round” to run the next round.';
      flight.hidden = false;
    } else {
      flight.hidden = true;
    }
  }

  function renderCharts() {
    const rows = committed();
    if (charts.length) {
      charts[0].update(rows);
      charts[1].update(rows);
      charts[2].update(rounds);
      charts[3].update(evaluation);
    } else {
      accFigure.dataset.points = lossFigure.dataset.points = String(rows.length);
      partFigure.dataset.points = String(rounds.length);
      fedFigure.dataset.points = String(evaluation.length);
    }
  }

  // The evaluated rounds: the mean each committed with, and who answered how.
  function renderEvaluationRounds() {
    const count = (e, status) => (e.clients && e.clients[status]) || 0;
    fill(fedRoundsBox, table({
      caption: 'Federated evaluation per round',
      columns: [
        { label: 'Round', className: 'num', value: (e) => (e.final ? `${e.round} (final)` : e.round) },
        { label: 'Accuracy', className: 'num', value: (e) => percent(e.accuracy) },
        { label: 'Loss', className: 'num', value: (e) => metric(e.loss) },
        { label: 'Test samples', className: 'num', value: (e) => (e.per_client ? number(e.samples) : 'sum only') },
        { label: 'Evaluated', className: 'num', value: (e) => (e.per_client ? `${count(e, 'ok')} / ${Object.values(e.clients).reduce((a, b) => a + b, 0)}` : '') },
        { label: 'Not evaluated', value: (e) => ['refused', 'failed', 'timeout', 'offline', 'dropped']
          .filter((s) => count(e, s) > 0).map((s) => `${count(e, s)} ${s === 'timeout' ? 'timed out' : s}`).join(', ') },
      ],
      rows: evaluation,
      rowAttrs: (e) => ({ dataset: { round: String(e.round) }, class: e.round === selected ? 'selected' : null }),
      empty: run && run.config && run.config.federated_evaluation === false
        ? 'Federated evaluation is off for this run.' : 'No round has been evaluated yet.',
    }));
    for (const tr of fedRoundsBox.querySelectorAll('tbody tr[data-round]')) {
      tr.addEventListener('click', () => selectRound(Number(tr.dataset.round), true));
    }
  }

  // Each client's answer for the selected round (only evaluated rounds are asked for).
  async function renderEvaluationClients() {
    const round = selected;
    const summary = evaluation.find((e) => e.round === round);
    if (!round || !summary) {
      fedMeta.textContent = round ? `Round ${round} was not evaluated by the clients.` : '';
      fill(fedClientsBox, null);
      return;
    }
    if (!summary.per_client) {
      fedMeta.textContent = `Round ${round}: secure aggregation; the sites sent only the sum of their metrics (accuracy ${percent(summary.accuracy)}).`;
      fill(fedClientsBox, null);
      return;
    }
    try {
      const answer = await api.roundEvaluation(id, round);
      if (!ctx.alive || round !== selected) return;
      fedMeta.textContent = `Round ${round}${answer.final ? ' (the final model)' : ''}: weighted mean accuracy ${percent(answer.accuracy)}, loss ${metric(answer.loss)}.`;
      fill(fedClientsBox, table({
        caption: `Federated evaluation of round ${round}, per client`,
        columns: [
          { label: 'Client', value: (r) => r.client_id },
          { label: 'Status', value: (r) => evaluationBadge(r.status) },
          { label: 'Accuracy', className: 'num', value: (r) => percent(r.accuracy) },
          { label: 'Loss', className: 'num', value: (r) => metric(r.loss) },
          { label: 'Test samples', className: 'num', value: (r) => (r.status === 'ok' ? number(r.samples) : '') },
          { label: 'Message', className: 'reason', value: (r) => r.message || '' },
        ],
        rows: answer.items,
        rowAttrs: (r) => ({ dataset: { client: r.client_id, status: r.status } }),
        empty: 'No client was asked to evaluate this round.',
      }));
    } catch (e) {
      if (!ctx.alive) return;
      fill(fedClientsBox, h('p.notice', { dataset: { kind: 'bad' } }, `Cannot load the evaluation of round ${round}: ${e.message}`));
    }
  }

  function renderRounds() {
    fill(roundsBox, table({
      columns: [
        { label: 'Round', className: 'num', value: (r) => (r.attempt > 1 ? `${r.round} (attempt ${r.attempt})` : r.round) },
        { label: 'State', value: (r) => roundBadge(r.state) },
        { label: 'Started', className: 'when', value: (r) => h('time', { title: dateTime(r.started_ms) }, clock(r.started_ms)) },
        { label: 'Duration', className: 'num', value: (r) => seconds(r.duration_s) },
        { label: 'Accepted', className: 'num', value: (r) => `${r.accepted} / ${r.selected}` },
        { label: 'Rejected', className: 'num', value: (r) => r.rejected },
        { label: 'Timed out', className: 'num', value: (r) => r.timed_out },
        { label: 'Dropped', className: 'num', value: (r) => r.dropped },
        { label: 'Train loss', className: 'num', value: (r) => metric(r.train_loss) },
        { label: 'Server acc.', className: 'num', value: (r) => percent(r.eval_accuracy) },
        { label: 'Fed. acc.', className: 'num', value: (r) => percent(r.fed_eval_accuracy) },
        { label: 'Fed. loss', className: 'num', value: (r) => metric(r.fed_eval_loss) },
        { label: 'Traffic ↑/↓', className: 'num', value: (r) => `${bytes(r.bytes_up)} / ${bytes(r.bytes_down)}` },
        { label: 'ε spent', className: 'num', value: (r) => (r.epsilon === null || r.epsilon === undefined ? '' : r.epsilon.toFixed(3)) },
        { label: 'Secure', value: (r) => (r.secure_aggregation ? 'SecAgg+' : '') },
        { label: 'Failure', value: (r) => r.failure_reason || '' },
      ],
      rows: rounds,
      rowAttrs: (r) => ({ dataset: { round: String(r.round), state: r.state }, class: r.round === selected ? 'selected' : null }),
      empty: runActive(run) ? 'No round has finished yet. Rounds appear here as they commit.' : 'This run has no rounds.',
    }));
    // Click a row to see its clients.
    for (const tr of roundsBox.querySelectorAll('tbody tr[data-round]')) {
      tr.addEventListener('click', () => selectRound(Number(tr.dataset.round), true));
    }
  }

  function renderRoundSelect() {
    const numbers = [...new Set(rounds.map((r) => r.round))];
    const previous = roundSelect.value;
    fill(roundSelect, numbers.length === 0
      ? h('option', { value: '' }, 'no rounds yet')
      : numbers.slice().reverse().map((n) => {
        const last = rounds.filter((r) => r.round === n).at(-1);
        return h('option', { value: String(n), selected: n === selected }, `Round ${n} · ${last.state}`);
      }));
    roundSelect.disabled = numbers.length === 0;
    if (selected !== null) roundSelect.value = String(selected);
    else if (previous) roundSelect.value = previous;
  }

  function renderConfig() {
    const c = run.config || {};
    const entries = [
      ['Model', c.model ? [c.model.type, compact(Object.fromEntries(Object.entries(c.model).filter(([k]) => k !== 'type')))]
        .filter((x) => x && x !== '').join(' · ') : undefined],
      ['Strategy', c.strategy],
      ['Rounds', c.rounds],
      ['Clients per round', c.clients_per_round ?? (c.fraction !== undefined ? `${percent(c.fraction, 0)} of online` : undefined)],
      ['Minimum clients', c.min_clients],
      ['Clients online before a round', c.min_available_clients > 0 ? c.min_available_clients : undefined],
      ['Local epochs', c.local_epochs],
      ['Batch size', c.batch_size],
      ['Optimizer', c.optimizer ? compact(c.optimizer) : undefined],
      ['Round timeout', c.round_timeout_s !== undefined ? seconds(c.round_timeout_s) : undefined],
      ['Seed', c.seed],
      ['Federated evaluation', c.federated_evaluation === undefined ? undefined
        : (c.federated_evaluation ? `yes${c.evaluate_every > 1 ? `, every ${c.evaluate_every} rounds and the last` : ''}` : 'no')],
      ['Server test set', c.server_test_set || undefined],
      ['On failed round', c.on_failed_round],
      ['Manual', run.manual ? 'yes: each round waits for an admin' : 'no'],
    ].filter(([, v]) => v !== undefined && v !== null && v !== '');
    fill(configBox, entries.flatMap(([k, v]) => [h('dt', k), h('dd', String(v))]));
  }

  async function renderResults() {
    const round = selected;
    downloadButton.disabled = !(round && rounds.some((r) => r.round === round && r.state === 'committed'));
    if (!round) {
      fill(resultsBox, h('p.muted', 'Pick a round to see what each client did.'));
      roundMeta.textContent = '';
      return;
    }
    const attempts = rounds.filter((r) => r.round === round);
    const last = attempts.at(-1);
    roundMeta.textContent = last
      ? `Round ${round}${last.attempt > 1 ? `, attempt ${last.attempt}` : ''}: ${last.state}, ${last.accepted} of ${last.selected} updates accepted in ${seconds(last.duration_s)}${last.failure_reason ? ` — ${last.failure_reason}` : ''}.`
      : `Round ${round}`;
    try {
      const { items } = await api.results(id, round);
      if (!ctx.alive || round !== selected) return;
      fill(resultsBox, table({
        caption: `Per-client results of round ${round}`,
        columns: [
          { label: 'Client', value: (r) => r.client_id },
          { label: 'Status', value: (r) => resultBadge(r.status) },
          { label: 'Samples', className: 'num', value: (r) => number(r.samples) },
          { label: 'Loss', className: 'num', value: (r) => metric(r.loss) },
          { label: 'Accuracy', className: 'num', value: (r) => percent(r.accuracy) },
          { label: 'Duration', className: 'num', value: (r) => seconds(r.duration_s) },
          { label: 'Eval loss', className: 'num', value: (r) => metric(r.eval_loss) },
          { label: 'Eval acc.', className: 'num', value: (r) => percent(r.eval_accuracy) },
          { label: 'Traffic ↑/↓', className: 'num', value: (r) => `${bytes(r.bytes_up)} / ${bytes(r.bytes_down)}` },
        { label: 'ε spent', className: 'num', value: (r) => (r.epsilon === null || r.epsilon === undefined ? '' : r.epsilon.toFixed(3)) },
        { label: 'Secure', value: (r) => (r.secure_aggregation ? 'SecAgg+' : '') },
          { label: 'Reason', className: 'reason', value: (r) => r.reason || '' },
        ],
        rows: items,
        rowAttrs: (r) => ({ dataset: { client: r.client_id, status: r.status } }),
        empty: 'No client results for this round.',
      }));
    } catch (e) {
      if (!ctx.alive) return;
      fill(resultsBox, h('p.notice', { dataset: { kind: 'bad' } }, `Cannot load the results of round ${round}: ${e.message}`));
    }
  }

  function selectRound(round, byUser) {
    if (!Number.isFinite(round) || round <= 0) return;
    selected = round;
    if (byUser) {
      followLatest = round === Math.max(0, ...rounds.map((r) => r.round));
      const q = new URLSearchParams(ctx.query);
      q.set('round', String(round));
      history.replaceState(null, '', `#/runs/${id}?${q}`);
    }
    roundSelect.value = String(round);
    for (const tr of [...roundsBox.querySelectorAll('tbody tr[data-round]'), ...fedRoundsBox.querySelectorAll('tbody tr[data-round]')]) {
      tr.classList.toggle('selected', Number(tr.dataset.round) === round);
    }
    renderResults();
    renderEvaluationClients();
  }
  roundSelect.addEventListener('change', () => selectRound(Number(roundSelect.value), true));

  // --- actions ---------------------------------------------------------------------
  let sayTimer = null;
  function say(text, kind = 'info') {
    clearTimeout(sayTimer);
    fill(actionMsg, text ? h('p.notice', { dataset: { kind }, role: kind === 'bad' ? 'alert' : null }, text) : null);
    // Confirmations fade after a while; errors stay until the next action.
    if (text && kind === 'ok') sayTimer = setTimeout(() => actionMsg.replaceChildren(), 8000);
  }
  ctx.cleanup(() => clearTimeout(sayTimer));

  function confirmStop() {
    confirming = true;
    renderHeader();
    actions.querySelector('#cancel-stop').focus();
  }

  function cancelStop() {
    confirming = false;
    renderHeader();
    actions.querySelector('#stop-run')?.focus();
  }

  async function stopRun() {
    for (const b of actions.querySelectorAll('button')) b.disabled = true;
    confirming = false;
    try {
      run = await api.stopRun(id);
      if (!ctx.alive) return;
      say(`Run stopped (state: ${run.state}).`, 'ok');
    } catch (e) {
      if (!ctx.alive) return;
      say(`Cannot stop the run: ${e.message}`, 'bad');
    }
    load();
  }

  async function nextRound() {
    const button = actions.querySelector('#next-round');
    if (button) button.disabled = true;
    try {
      const answer = await api.nextRound(id);
      if (!ctx.alive) return;
      say(`Round ${answer.round} started.`, 'ok');
      actionMsg.querySelector('.notice').dataset.about = 'round';
    } catch (e) {
      if (!ctx.alive) return;
      say(`Cannot start the next round: ${e.message}`, 'bad');
    }
    load();
  }

  downloadButton.addEventListener('click', async () => {
    const round = selected;
    const format = downloadFormat.value;
    downloadButton.disabled = true;
    try {
      const blob = await api.model(id, round, format);
      const url = URL.createObjectURL(blob);
      const a = h('a', { href: url, download: `run-${id}-round-${round}.${format}` });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (e) {
      if (ctx.alive) say(`Cannot download the model: ${e.message}`, 'bad');
    } finally {
      downloadButton.disabled = false;
    }
  });

  // --- loading ---------------------------------------------------------------------
  let firstLoad = true;
  async function load() {
    try {
      const [newRun, newRounds, newInfo, newEvaluation] = await Promise.all([
        api.run(id), api.rounds(id), api.info(), api.evaluation(id)]);
      if (!ctx.alive) return;
      run = newRun;
      rounds = newRounds;
      evaluation = newEvaluation.items;
      info = newInfo;
      const latest = rounds.length ? rounds.at(-1).round : null;
      const previousSelected = selected;
      if (followLatest && latest !== null) selected = latest;
      renderHeader();
      renderSummary();
      renderFlight();
      renderCharts();
      renderRounds();
      renderEvaluationRounds();
      renderRoundSelect();
      renderConfig();
      if (firstLoad || selected !== previousSelected || followLatest) {
        renderResults();
        renderEvaluationClients();
      }
      firstLoad = false;
    } catch (e) {
      if (firstLoad) ctx.fail(e, root);
      else say(`Live refresh failed: ${e.message}`, 'bad');
    }
  }

  const reload = coalesce(load, 300);
  ctx.cleanup(reload.cancel);
  ctx.onEvent('*', (e) => {
    if (e.run_id !== id) return;
    if (e.kind === 'round_started') {
      live = { round: e.round, accepted: 0, rejected: 0 };
      if (info) { info.active_round = e.round; info.run_active = true; info.active_run_id = id; info.waiting_for_admin = false; }
      renderFlight();
      reload();
    } else if (e.kind === 'update_accepted' || e.kind === 'update_rejected') {
      if (!live || live.round !== e.round) live = { round: e.round, accepted: 0, rejected: 0 };
      live[e.kind === 'update_accepted' ? 'accepted' : 'rejected'] += 1;
      if (run) renderFlight();
    } else {
      // "Round N started." is old news once a round ends.
      if (['round_committed', 'round_failed', 'run_ended'].includes(e.kind)
        && actionMsg.querySelector('.notice[data-about="round"]')) say(null);
      reload();
    }
  });
  ctx.onResync(reload);
  ctx.every(30000, load);  // "updated … ago" and a safety net for missed events
  load();
}
