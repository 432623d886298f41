// The console's shell: login, the navigation, the page router (#/page), live refresh.
import { api, clear, h, session } from './lib.js';
import overview from './pages/overview.js';
import keys from './pages/keys.js';
import usage from './pages/usage.js';
import routes from './pages/routes.js';
import registry from './pages/registry.js';
import stores from './pages/stores.js';
import vectors from './pages/vectors.js';
import batches from './pages/batches.js';
import scheduler from './pages/scheduler.js';
import audit from './pages/audit.js';

// Each page says whether it is shown for this login and server (a page for a component that is
// not configured is absent) and renders into <main>; render may return a stop function.
const PAGES = [overview, keys, usage, routes, registry, stores, vectors, batches, scheduler, audit];

const app = document.getElementById('app');
let ctx = null;
let stopPage = null;

// GET /admin/whoami answers every caller (no error for a missing or wrong token, so a fresh tab
// logs no failed request): role "admin" (the admin token, or any caller when access control is
// off), "team" (a team key: read-only, its team's keys and usage) or "none".
const whoami = (token) => api('/admin/whoami', { token });

async function start() {
  try {
    const me = await whoami(session.token());
    if (me.role !== 'none') return enter(me);
  } catch (e) {
    return showLogin(e.message);
  }
  session.clear();
  return showLogin();
}

function showLogin(error) {
  stopCurrent();
  const token = h('input', { id: 'login-token', name: 'token', type: 'password', autocomplete: 'off', required: true, 'aria-describedby': 'login-help' });
  const actor = h('input', { id: 'login-actor', name: 'actor', type: 'text', autocomplete: 'name', placeholder: 'e.g. ann' });
  const msg = h('div', { class: 'field-error', role: 'alert', id: 'login-error' }, error || '');
  const form = h('form', { class: 'login card', 'aria-label': 'Sign in' },
    h('h1', {}, 'Infera console'),
    h('div', { class: 'field' }, h('label', { for: 'login-token' }, 'Admin token or team API key'), token,
      h('p', { class: 'help', id: 'login-help' }, 'The admin token (INFERA_ADMIN_TOKEN) manages everything; a team key (sk-inf-…) shows that team\'s keys and usage, read-only. Kept in this tab only (sessionStorage).')),
    h('div', { class: 'field' }, h('label', { for: 'login-actor' }, 'Your name (recorded in the audit log)'), actor),
    msg,
    h('button', { class: 'primary', type: 'submit' }, 'Sign in'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    msg.textContent = '';
    try {
      const me = await whoami(token.value.trim());
      if (me.role === 'none') {
        msg.textContent = 'That token is not the admin token or a valid team key.';
        token.focus();
        return;
      }
      session.save(token.value.trim(), actor.value.trim());
      enter(me);
    } catch (e) {
      msg.textContent = e.message;
      token.focus();
    }
  });
  clear(app, h('main', { id: 'main', class: 'login-page' }, form));
  token.focus();
}

async function enter(me) {
  // whoami names the running components (and the config file) too: no second round trip.
  ctx = { me, readOnly: me.role !== 'admin', status: { components: me.components || {}, config_path: me.config_path } };
  const pages = PAGES.filter((p) => p.available(ctx));
  ctx.pages = pages;
  const nav = h('nav', { 'aria-label': 'Pages' }, h('ul', {}, pages.map((p) => h('li', {}, h('a', { href: `#/${p.id}`, 'data-page': p.id }, p.title)))));
  const who = me.role === 'admin' ? (me.access_control === false ? 'admin (no access control)' : `admin${session.actor() ? ` · ${session.actor()}` : ''}`) : `team ${me.team} · read-only`;
  const header = h('header', { class: 'top' },
    h('a', { class: 'skip', href: '#main' }, 'Skip to content'),
    h('span', { class: 'brand' }, 'Infera'),
    nav,
    h('span', { class: 'who', 'data-role': me.role }, who),
    me.access_control === false ? null : h('button', { type: 'button', class: 'link', onclick: logout }, 'Sign out'));
  const main = h('main', { id: 'main', tabindex: '-1' });
  const footer = h('footer', {});
  clear(app, header, main, footer);
  window.onhashchange = route;
  await route();
  if (me.role === 'admin') {
    api('/admin/status').then((st) => { footer.textContent = `infera ${st.version} (${st.commit}) · config generation ${st.generation} · ${st.workers} workers`; }).catch(() => {});
  }
}

function logout() {
  session.clear();
  window.onhashchange = null;
  location.hash = '';
  showLogin();
}

function stopCurrent() {
  if (stopPage) stopPage();
  stopPage = null;
}

async function route() {
  const id = (location.hash.match(/^#\/([a-z]+)/) || [])[1];
  const page = ctx.pages.find((p) => p.id === id) || ctx.pages[0];
  if (!page) return;
  stopCurrent();
  for (const a of document.querySelectorAll('nav a')) {
    if (a.dataset.page === page.id) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  const main = document.getElementById('main');
  document.body.dataset.ready = '';
  const heading = h('h1', { tabindex: '-1' }, page.title);
  clear(main, heading);
  // A keyboard or screen-reader user lands on the new page's heading, not on the old link.
  heading.focus({ preventScroll: true });
  document.title = `${page.title} · Infera`;
  const body = h('div', { class: 'page', 'data-page': page.id });
  main.append(body);
  try {
    const stop = await page.render(body, ctx);
    stopPage = typeof stop === 'function' ? stop : null;
  } catch (e) {
    body.append(h('p', { class: 'error', role: 'alert' }, e.message));
  }
  // What the browser test waits for (and times): the page's first data is on screen.
  document.body.dataset.ready = page.id;
  performance.mark(`ready:${page.id}`);
}

start();
