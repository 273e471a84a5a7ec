// Validation of the "start a run" form, before anything is sent. Pure functions over
// the form's string values, so Node tests them too (tests/web/unit.test.mjs). The
// ranges mirror server/federation/run_config.cpp and shared/model (the server checks
// again and its 400 message is shown if it disagrees).

export const MODEL_TYPES = ['logreg', 'mlp', 'cnn'];
export const OPTIMIZERS = ['sgd', 'adam'];

export const DEFAULTS = {
  name: '',
  model: 'logreg',
  hidden: '64, 32',
  rounds: '10',
  clients_per_round: '3',
  min_clients: '2',
  local_epochs: '1',
  batch_size: '32',
  optimizer: 'sgd',
  lr: '0.05',
  round_timeout_s: '60',
  seed: '1',
  federated_evaluation: true,
  manual: false,
};

// Field labels, in form order, for the error summary.
export const LABELS = {
  name: 'Name',
  model: 'Model type',
  hidden: 'Hidden layers',
  rounds: 'Rounds',
  clients_per_round: 'Clients per round',
  min_clients: 'Minimum clients',
  local_epochs: 'Local epochs',
  batch_size: 'Batch size',
  optimizer: 'Optimizer',
  lr: 'Learning rate',
  round_timeout_s: 'Round timeout',
  seed: 'Seed',
};

const INTEGER = /^[+]?\d+$/;
const DECIMAL = /^[+-]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/;

function integer(text, low, high, what) {
  const t = String(text ?? '').trim();
  if (t === '') return { error: `${what} is required.` };
  if (!INTEGER.test(t)) return { error: `${what} must be a whole number.` };
  const v = Number(t);
  if (!Number.isSafeInteger(v) || v < low || v > high) {
    return { error: `${what} must be between ${low.toLocaleString('en')} and ${high.toLocaleString('en')}.` };
  }
  return { value: v };
}

function decimal(text, { low, high, lowOpen = false }, what) {
  const t = String(text ?? '').trim();
  if (t === '') return { error: `${what} is required.` };
  if (!DECIMAL.test(t)) return { error: `${what} must be a number.` };
  const v = Number(t);
  if (!Number.isFinite(v) || (lowOpen ? v <= low : v < low) || v > high) {
    return { error: `${what} must be ${lowOpen ? 'greater than' : 'at least'} ${low} and at most ${high}.` };
  }
  return { value: v };
}

// values: the form's strings (and booleans for the check boxes).
// Returns {errors: {field: message}, config} — config only when there are no errors.
export function validateRun(values) {
  const errors = {};
  const config = {};
  const take = (field, result) => {
    if (result.error) errors[field] = result.error;
    else config[field] = result.value;
    return result.value;
  };

  const name = String(values.name ?? '').trim();
  if (name === '') errors.name = 'Give the run a name, e.g. “breast-cancer-fedavg”.';
  else if (new TextEncoder().encode(name).length > 128) errors.name = 'Name must be at most 128 bytes.';
  // eslint-disable-next-line no-control-regex
  else if (/[\u0000-\u001f\u007f]/.test(name)) errors.name = 'Name must not contain control characters.';
  else config.name = name;

  const type = values.model;
  if (!MODEL_TYPES.includes(type)) {
    errors.model = 'Choose logreg, mlp or cnn.';
  } else {
    config.model = { type };
    if (type === 'mlp') {
      const parts = String(values.hidden ?? '').split(/[\s,]+/).filter(Boolean);
      if (parts.length === 0) errors.hidden = 'An MLP needs at least one hidden layer, e.g. “64, 32”.';
      else if (parts.length > 16) errors.hidden = 'At most 16 hidden layers.';
      else if (parts.some((p) => !INTEGER.test(p) || Number(p) < 1 || Number(p) > 65536)) {
        errors.hidden = 'Hidden layer widths must be whole numbers between 1 and 65,536, separated by commas.';
      } else config.model.hidden = parts.map(Number);
    }
  }

  take('rounds', integer(values.rounds, 1, 100000, 'Rounds'));
  const perRound = take('clients_per_round', integer(values.clients_per_round, 1, 1000000, 'Clients per round'));
  const minClients = take('min_clients', integer(values.min_clients, 1, 1000000, 'Minimum clients'));
  if (!errors.clients_per_round && !errors.min_clients && minClients > perRound) {
    errors.min_clients = `Minimum clients (${minClients}) cannot exceed clients per round (${perRound}).`;
    delete config.min_clients;
  }
  take('local_epochs', integer(values.local_epochs, 1, 1000, 'Local epochs'));
  take('batch_size', integer(values.batch_size, 1, 65536, 'Batch size'));

  const kind = values.optimizer;
  const lr = decimal(values.lr, { low: 0, high: 100, lowOpen: true }, 'Learning rate');
  if (!OPTIMIZERS.includes(kind)) errors.optimizer = 'Choose SGD or Adam.';
  if (lr.error) errors.lr = lr.error;
  if (!errors.optimizer && !errors.lr) config.optimizer = { kind, lr: lr.value };

  take('round_timeout_s', decimal(values.round_timeout_s, { low: 0.1, high: 86400 }, 'Round timeout'));
  take('seed', integer(values.seed, 0, 9e15, 'Seed'));
  config.federated_evaluation = Boolean(values.federated_evaluation);
  config.manual = Boolean(values.manual);

  if (Object.keys(errors).length) return { errors, config: null };
  // The key order of the JSON sent: as the docs show it.
  const ordered = {};
  for (const key of ['name', 'model', 'rounds', 'clients_per_round', 'min_clients', 'local_epochs',
    'batch_size', 'optimizer', 'round_timeout_s', 'seed', 'federated_evaluation', 'manual']) {
    ordered[key] = config[key];
  }
  return { errors, config: ordered };
}

// Which form field a server message is about, if it names one ("'rounds' must be ...",
// "optimizer: 'lr' must be positive"), so the 400 is shown next to that field too.
export function fieldOfServerMessage(message) {
  const text = String(message || '');
  const quoted = [...text.matchAll(/'([a-z_]+)'/g)].map((m) => m[1]);
  const map = { type: 'model', hidden: 'hidden', kind: 'optimizer', lr: 'lr', model: 'model', optimizer: 'optimizer' };
  for (const key of quoted) {
    if (key in LABELS) return key;
    if (key in map) return map[key];
  }
  const leading = /^(?:run config: )?([a-z_]+)[:\s]/.exec(text);
  if (leading && leading[1] in LABELS) return leading[1];
  return null;
}
