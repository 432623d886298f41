// Keys & teams: /admin/teams, /admin/keys, /admin/users. An admin creates (the secret is shown
// once, with a copy button), edits limits, model allow-lists and budgets, rotates and revokes; a
// team key sees its own team and keys, read-only.
import { api, clear, field, fmt, formValues, h, modal, section, showFormError, table, toast, badge, confirmAction } from '../lib.js';

const patterns = (v) => (v === undefined ? undefined : v.split(',').map((s) => s.trim()).filter(Boolean));

function limitsText(r) {
  const parts = [];
  if (r.rpm) parts.push(`${fmt.int(r.rpm)} rpm`);
  if (r.tpm) parts.push(`${fmt.int(r.tpm)} tpm`);
  if (r.daily_tokens) parts.push(`${fmt.int(r.daily_tokens)} tokens/day`);
  return parts.join(' · ') || 'no limits';
}

function budgetText(t) {
  if (t.budget_usd) return `$${t.budget_usd} / ${t.budget_period}`;
  if (t.budget_tokens) return `${fmt.int(t.budget_tokens)} tokens / ${t.budget_period}`;
  return '–';
}

async function showSecret(title, created) {
  const secret = h('div', { class: 'secret', 'data-secret': '' }, created.key);
  const copy = h('button', { type: 'button', class: 'primary', 'data-copy': '' }, 'Copy');
  copy.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(created.key);
      copy.textContent = 'Copied';
    } catch {
      // Clipboard refused (an insecure context or no permission): leave it selected to copy.
      const range = document.createRange();
      range.selectNodeContents(secret);
      getSelection().removeAllRanges();
      getSelection().addRange(range);
      copy.textContent = 'Selected: press Ctrl+C';
    }
  });
  await modal(title, h('div', {},
    h('p', {}, `Key ${created.id} of team ${created.team}. `, h('strong', {}, 'This secret is shown only once'), ': store it now.'),
    secret, h('div', { class: 'tools' }, copy)), [{ label: 'Done', value: true, primary: true }]);
}

// A form dialog for a record's editable fields; resolves after a successful PATCH.
async function editDialog(title, fields, save) {
  const form = h('form', { class: 'inline' }, fields);
  for (;;) {
    const ok = await new Promise((resolve) => {
      const dlg = h('dialog', { class: 'modal', 'aria-label': title });
      const done = (v) => { dlg.close(); dlg.remove(); resolve(v); };
      form.onsubmit = (e) => { e.preventDefault(); done(true); };
      dlg.append(h('h2', {}, title), form, h('div', { class: 'buttons' },
        h('button', { type: 'button', onclick: () => done(false) }, 'Cancel'),
        h('button', { type: 'button', class: 'primary', onclick: () => done(true) }, 'Save')));
      dlg.addEventListener('cancel', (e) => { e.preventDefault(); done(false); });
      document.body.append(dlg);
      dlg.showModal();
    });
    if (!ok) return false;
    try {
      await save(formValues(form));
      return true;
    } catch (e) {
      // Shown in the dialog again, at the field the API names.
      setTimeout(() => showFormError(form, e), 0);
    }
  }
}

function teamFields(t = {}) {
  return [
    field('models (patterns, comma-separated; empty = all)', 'models', { value: (t.models || []).join(', '), placeholder: 'llama*, text-*' }),
    field('rpm', 'rpm', { type: 'number', min: 0, value: t.rpm || '' }),
    field('tpm', 'tpm', { type: 'number', min: 0, value: t.tpm || '' }),
    field('daily tokens', 'daily_tokens', { type: 'number', min: 0, value: t.daily_tokens || '' }),
    field('budget USD', 'budget_usd', { type: 'number', min: 0, step: 'any', value: t.budget_usd || '' }),
    field('budget tokens', 'budget_tokens', { type: 'number', min: 0, value: t.budget_tokens || '' }),
    field('budget period', 'budget_period', { type: 'select', options: ['month', 'day'], value: t.budget_period || 'month' }),
  ];
}

function teamBody(v) {
  const out = { ...v, models: patterns(v.models ?? '') };
  for (const k of ['rpm', 'tpm', 'daily_tokens', 'budget_usd', 'budget_tokens']) out[k] = v[k] ?? 0;
  return out;
}

function keyFields(k = {}, teams = []) {
  return [
    teams.length ? field('team', 'team', { type: 'select', options: teams, value: k.team }) : null,
    field('name', 'name', { value: k.name || '', placeholder: 'ci-pipeline' }),
    field('models (inside the team\'s)', 'models', { value: (k.models || []).join(', '), placeholder: 'empty = the team\'s' }),
    field('rpm', 'rpm', { type: 'number', min: 0, value: k.rpm || '' }),
    field('tpm', 'tpm', { type: 'number', min: 0, value: k.tpm || '' }),
    teams.length ? field('expires in', 'expires_in', { placeholder: '30d, 12h (empty = never)' }) : null,
    field('may name users (x-infera-user)', 'allow_user', { type: 'checkbox', value: k.allow_user }),
  ];
}

export default {
  id: 'keys',
  title: 'Keys & teams',
  available: (ctx) => !!ctx.status.components.governance,
  async render(el, ctx) {
    const ro = ctx.readOnly;
    const teamsBox = h('div');
    const keysBox = h('div', { class: 'scroll' });
    const usersBox = h('div');
    const teamFilter = h('select', { 'aria-label': 'Show keys of team' });
    const showRevoked = h('input', { type: 'checkbox', id: 'show-revoked' });
    const search = h('input', { type: 'search', id: 'key-search', placeholder: 'Find a key by id, name or team…', 'aria-label': 'Find a key' });
    let teams = [];

    const loadTeams = async () => {
      teams = ro ? [await api(`/admin/teams/${encodeURIComponent(ctx.me.team)}`)] : (await api('/admin/teams')).teams;
      const rows = table([
        { label: 'Team', render: (t) => t.name },
        { label: 'Models', render: (t) => fmt.list(t.models) },
        { label: 'Limits', render: limitsText },
        { label: 'Per user', render: (t) => (t.user_rpm || t.user_tpm ? `${t.user_rpm || '–'} rpm · ${t.user_tpm || '–'} tpm` : '–') },
        { label: 'Budget', render: budgetText },
        ro ? null : { label: '', render: (t) => h('div', { class: 'tools' },
          h('button', { type: 'button', class: 'small', onclick: () => editTeam(t) }, 'Edit'),
          h('button', { type: 'button', class: 'small danger', onclick: () => deleteTeam(t) }, 'Delete')) },
      ].filter(Boolean), teams, { label: 'Teams', id: (t) => t.name, empty: 'no teams yet: create one below' });
      clear(teamsBox, rows);
      const cur = teamFilter.value;
      clear(teamFilter, ro ? null : h('option', { value: '' }, 'all teams'), teams.map((t) => h('option', { value: t.name, selected: t.name === cur }, t.name)));
      if (!ro) renderCreateKey();
    };

    let keys = [];
    const loadKeys = async () => {
      const team = ro ? ctx.me.team : teamFilter.value;
      keys = (await api(`/admin/keys${team ? `?team=${encodeURIComponent(team)}` : ''}`)).keys;
      renderKeys();
    };
    const renderKeys = () => {
      const q = search.value.trim().toLowerCase();
      const shown = keys.filter((k) => (showRevoked.checked || k.state !== 'revoked') && (!q || `${k.id} ${k.name} ${k.team}`.toLowerCase().includes(q)));
      clear(keysBox, table([
        { label: 'Key id', render: (k) => h('code', {}, k.id) },
        { label: 'Name', render: (k) => k.name || '–' },
        { label: 'Team', render: (k) => k.team },
        { label: 'State', render: (k) => badge(k.state, k.state === 'active' ? 'ok' : k.state === 'revoked' ? 'bad' : 'muted') },
        { label: 'Models', render: (k) => fmt.list(k.models) },
        { label: 'Limits', render: limitsText },
        { label: 'Expires', render: (k) => (k.expires_ms ? fmt.time(k.expires_ms) : 'never') },
        { label: 'Created', render: (k) => fmt.time(k.created_ms) },
        ro ? null : { label: '', render: (k) => (k.state === 'revoked' ? '' : h('div', { class: 'tools' },
          h('button', { type: 'button', class: 'small', onclick: () => editKey(k) }, 'Edit'),
          h('button', { type: 'button', class: 'small', onclick: () => rotateKey(k) }, 'Rotate'),
          h('button', { type: 'button', class: 'small danger', 'data-action': 'revoke', onclick: () => revokeKey(k) }, 'Revoke'))) },
      ].filter(Boolean), shown, { label: 'Keys', id: (k) => k.id, empty: 'no keys' }));
    };

    const loadUsers = async () => {
      const team = ro ? ctx.me.team : '';
      const { users } = await api(`/admin/users${team ? `?team=${encodeURIComponent(team)}` : ''}`).catch(() => ({ users: [] }));
      clear(usersBox, table([
        { label: 'User', render: (u) => u.name },
        { label: 'Team', render: (u) => u.team },
        { label: 'Models', render: (u) => fmt.list(u.models) },
        { label: 'Limits', render: limitsText },
        { label: 'Budget', render: (u) => (u.budget_usd ? `$${u.budget_usd}` : u.budget_tokens ? `${fmt.int(u.budget_tokens)} tokens` : '–') },
        ro ? null : { label: '', render: (u) => h('button', { type: 'button', class: 'small danger', onclick: () => deleteUser(u) }, 'Delete') },
      ].filter(Boolean), users, { label: 'Users', empty: 'no user records (users named by x-infera-user get the team\'s per-user defaults)' }));
    };

    const createKeyBox = h('div');
    const renderCreateKey = () => {
      const form = h('form', { class: 'inline', 'aria-label': 'Create a key', id: 'create-key' }, keyFields({ team: teamFilter.value }, teams.map((t) => t.name)),
        h('button', { type: 'submit', class: 'primary' }, 'Create key'));
      form.addEventListener('submit', async (e) => {
        e.preventDefault();
        const v = formValues(form);
        try {
          const created = await api('/admin/keys', { method: 'POST', body: { ...v, models: patterns(v.models) } });
          await showSecret('New key', created);
          form.reset();
          await loadKeys();
        } catch (err) {
          showFormError(form, err);
        }
      });
      clear(createKeyBox, teams.length ? form : h('p', { class: 'muted' }, 'Create a team first.'));
    };

    const editTeam = async (t) => {
      if (await editDialog(`Team ${t.name}`, [...teamFields(t), field('per-user rpm', 'user_rpm', { type: 'number', min: 0, value: t.user_rpm || '' }), field('per-user tpm', 'user_tpm', { type: 'number', min: 0, value: t.user_tpm || '' })],
        (v) => api(`/admin/teams/${encodeURIComponent(t.name)}`, { method: 'PATCH', body: { ...teamBody(v), user_rpm: v.user_rpm ?? 0, user_tpm: v.user_tpm ?? 0 } }))) {
        toast(`team ${t.name} saved`);
        await loadTeams();
      }
    };
    const deleteTeam = async (t) => {
      if (!(await confirmAction(`Delete team ${t.name}?`, 'Its user records are deleted too. Refused while it has active keys.', 'Delete team'))) return;
      try {
        await api(`/admin/teams/${encodeURIComponent(t.name)}`, { method: 'DELETE' });
        toast(`team ${t.name} deleted`);
        await loadTeams();
      } catch (e) {
        toast(e.message, 'error');
      }
    };
    const editKey = async (k) => {
      if (await editDialog(`Key ${k.id}`, keyFields(k), (v) => api(`/admin/keys/${k.id}`, { method: 'PATCH', body: { ...v, models: patterns(v.models ?? ''), rpm: v.rpm ?? 0, tpm: v.tpm ?? 0 } }))) {
        toast(`key ${k.id} saved`);
        await loadKeys();
      }
    };
    const rotateKey = async (k) => {
      const grace = h('input', { name: 'grace', value: '24h', 'aria-label': 'Grace period of the old key' });
      const go = await modal(`Rotate key ${k.id}?`, h('div', {}, h('p', {}, 'A new key with the same team, models and limits is created; the old one keeps working for the grace period.'),
        h('div', { class: 'field' }, h('label', {}, 'grace period (e.g. 24h, 15m, 0s)'), grace)), [{ label: 'Cancel', value: false }, { label: 'Rotate', value: true, primary: true }]);
      if (!go) return;
      try {
        const created = await api(`/admin/keys/${k.id}/rotate`, { method: 'POST', body: { grace: grace.value } });
        await showSecret('Rotated key', created);
        await loadKeys();
      } catch (e) {
        toast(e.message, 'error');
      }
    };
    const revokeKey = async (k) => {
      if (!(await confirmAction(`Revoke key ${k.id}?`, 'Requests with it are refused (401) from now on, on every replica within seconds. This cannot be undone.', 'Revoke'))) return;
      try {
        await api(`/admin/keys/${k.id}/revoke`, { method: 'POST' });
        toast(`key ${k.id} revoked`);
        await loadKeys();
      } catch (e) {
        toast(e.message, 'error');
      }
    };
    const deleteUser = async (u) => {
      if (!(await confirmAction(`Delete user ${u.team}/${u.name}?`, 'The user goes back to the team\'s per-user defaults.', 'Delete'))) return;
      await api(`/admin/users/${encodeURIComponent(u.team)}/${encodeURIComponent(u.name)}`, { method: 'DELETE' }).catch((e) => toast(e.message, 'error'));
      await loadUsers();
    };

    const createTeam = h('form', { class: 'inline', 'aria-label': 'Create a team', id: 'create-team' },
      field('name', 'name', { required: true, placeholder: 'ml' }), teamFields(), h('button', { type: 'submit', class: 'primary' }, 'Create team'));
    createTeam.addEventListener('submit', async (e) => {
      e.preventDefault();
      try {
        const t = await api('/admin/teams', { method: 'POST', body: teamBody(formValues(createTeam)) });
        toast(`team ${t.name} created`);
        createTeam.reset();
        await loadTeams();
      } catch (err) {
        showFormError(createTeam, err);
      }
    });
    const createUser = h('form', { class: 'inline', 'aria-label': 'Create a user' },
      field('team', 'team', { required: true }), field('name', 'name', { required: true }), field('models', 'models'),
      field('rpm', 'rpm', { type: 'number', min: 0 }), field('tpm', 'tpm', { type: 'number', min: 0 }),
      field('daily tokens', 'daily_tokens', { type: 'number', min: 0 }), field('budget USD', 'budget_usd', { type: 'number', min: 0, step: 'any' }),
      h('button', { type: 'submit' }, 'Create user'));
    createUser.addEventListener('submit', async (e) => {
      e.preventDefault();
      const v = formValues(createUser);
      try {
        await api('/admin/users', { method: 'POST', body: { ...v, models: patterns(v.models) } });
        createUser.reset();
        await loadUsers();
      } catch (err) {
        showFormError(createUser, err);
      }
    });

    teamFilter.addEventListener('change', () => { loadKeys(); if (!ro) renderCreateKey(); });
    showRevoked.addEventListener('change', renderKeys);
    let searchTimer = 0;
    search.addEventListener('input', () => { clearTimeout(searchTimer); searchTimer = setTimeout(renderKeys, 100); });
    el.append(
      h('p', { class: 'muted', role: 'note' }, ro ? `Read-only: signed in with a key of team ${ctx.me.team}.` : 'A key\'s models and limits are at most its team\'s (checked when it is saved).'),
      section('Teams', teamsBox, ro ? null : h('h3', {}, 'New team'), ro ? null : createTeam),
      section('Keys', h('div', { class: 'tools' }, search, ro ? null : teamFilter, h('label', { for: 'show-revoked' }, showRevoked, ' show revoked')), keysBox,
        ro ? null : h('h3', {}, 'New key'), ro ? null : createKeyBox),
      section('Users', usersBox, ro ? null : h('h3', {}, 'New user record'), ro ? null : createUser));
    await Promise.all([loadTeams(), loadKeys(), loadUsers()]);
  },
};
