// Login: the admin pastes a token made by `fedcore-server token create`. It is checked
// against GET /api/v1/info before it is kept (in sessionStorage, for this tab only).

import { api } from '../api.js';
import { h, setTitle } from '../dom.js';

export function mount(root, ctx) {
  setTitle('Log in');
  const input = h('input#token', {
    type: 'password', name: 'token', autocomplete: 'off', spellcheck: 'false',
    required: true, 'aria-describedby': 'token-help token-error',
  });
  const error = h('p.field-error#token-error', { role: 'alert' });
  const submit = h('button.btn.btn-primary', { type: 'submit' }, 'Log in');
  const form = h('form.panel.login', { novalidate: true },
    h('h1', 'Fedcore admin'),
    h('p.muted', 'Federated learning control plane. Log in with an API token.'),
    h('div.field',
      h('label', { for: 'token' }, 'API token'),
      input,
      h('p.help#token-help', 'Create one on the server with ',
        h('code', 'fedcore-server token create --config server.json --name you'),
        '. It is kept for this browser tab only.'),
      error),
    h('div.actions', submit));

  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const value = input.value.trim();
    error.textContent = '';
    input.removeAttribute('aria-invalid');
    if (!value) {
      error.textContent = 'Paste a token first.';
      input.setAttribute('aria-invalid', 'true');
      input.focus();
      return;
    }
    submit.disabled = true;
    submit.textContent = 'Checking…';
    try {
      await api.checkToken(value);
      if (ctx.alive) ctx.loggedIn(value);
    } catch (e) {
      if (!ctx.alive) return;
      error.textContent = e.status === 401
        ? 'This token was not accepted. Check that you pasted all of it and that it has not been revoked.'
        : `Cannot log in: ${e.message}`;
      input.setAttribute('aria-invalid', 'true');
      input.focus();
    } finally {
      submit.disabled = false;
      submit.textContent = 'Log in';
    }
  });
  root.append(h('div.login-wrap', form));
  input.focus();
}
