// Batches: every team's batches (GET /admin/batches): status, a progress bar with counts and an
// ETA while a batch runs, its validation errors, and Cancel for one that has not ended.
import { api, badge, clear, confirmAction, fmt, h, kpi, section, table, toast } from '../lib.js';

const REFRESH_MS = 2000;
const ENDED = new Set(['completed', 'failed', 'cancelled', 'expired']);

function done(b) {
  return b.request_counts.completed + b.request_counts.failed;
}

// "40 s" left at the rate so far, while a batch is in progress.
function eta(b) {
  const d = done(b);
  const total = b.request_counts.total;
  if (b.status !== 'in_progress' || !b.in_progress_at || d === 0 || d >= total) return '–';
  const elapsed = Date.now() / 1000 - b.in_progress_at;
  const left = Math.max(0, Math.round((elapsed / d) * (total - d)));
  return left >= 120 ? `${Math.round(left / 60)} min` : `${left} s`;
}

function progress(b) {
  const total = b.request_counts.total;
  const pct = total > 0 ? Math.round((100 * done(b)) / total) : 0;
  return h('div', { class: 'batch-progress' },
    h('progress', { max: 100, value: pct, 'aria-label': `${b.id} progress` }),
    h('span', {}, `${fmt.int(done(b))} / ${fmt.int(total)}${b.request_counts.failed ? ` (${fmt.int(b.request_counts.failed)} failed)` : ''}`));
}

function statusBadge(s) {
  const kind = s === 'completed' ? 'ok' : s === 'failed' || s === 'expired' ? 'bad' : s === 'cancelled' || s === 'cancelling' ? 'warn' : '';
  return badge(s, kind);
}

function errorsOf(b) {
  const errs = b.errors && b.errors.data ? b.errors.data : [];
  if (!errs.length) return '–';
  const first = errs.slice(0, 3).map((e) => `${e.line ? `line ${e.line}: ` : ''}${e.code}`).join('; ');
  return errs.length > 3 ? `${first}; … (${errs.length})` : first;
}

export default {
  id: 'batches',
  title: 'Batches',
  available: (ctx) => ctx.me.role === 'admin' && !!ctx.status.components.batch,
  async render(el, ctx) {
    let stopped = false;
    let timer = null;
    const stamp = h('p', { class: 'help' });
    const body = h('div', {});
    el.append(section('Batches (OpenAI Batch API, every team)', body, stamp));
    const cancel = async (b) => {
      if (!(await confirmAction(`Cancel ${b.id}?`, 'Lines not yet run are not run; answers so far stay in its output file.', 'Cancel batch'))) return;
      try {
        await api(`/admin/batches/${encodeURIComponent(b.id)}/cancel`, { method: 'POST' });
        toast(`${b.id} cancelling`);
        await refresh();
      } catch (e) {
        toast(e.message, 'error');
      }
    };
    const refresh = async () => {
      const list = await api('/admin/batches?limit=200');
      const rows = list.data;
      const running = rows.filter((b) => !ENDED.has(b.status));
      const lines = running.reduce((n, b) => n + b.request_counts.total - done(b), 0);
      clear(body,
        h('div', { class: 'kpis' },
          kpi('batches shown', fmt.int(rows.length)), kpi('running', fmt.int(running.length)),
          kpi('lines left', fmt.int(lines))),
        table([
          { label: 'Batch', render: (b) => b.id },
          { label: 'Team', render: (b) => b.team || '(shared)' },
          { label: 'Endpoint', render: (b) => b.endpoint },
          { label: 'Status', render: (b) => statusBadge(b.status) },
          { label: 'Progress', render: progress },
          { label: 'ETA', render: eta },
          { label: 'Created', render: (b) => new Date(b.created_at * 1000).toLocaleString() },
          { label: 'Errors', render: errorsOf },
          { label: '', render: (b) => (ENDED.has(b.status) || b.status === 'cancelling' || ctx.readOnly ? '' : h('button', { type: 'button', class: 'small danger', 'data-cancel': b.id, onclick: () => cancel(b) }, 'Cancel')) },
        ], rows, { label: 'Batches', empty: 'no batches yet', id: (b) => b.id }));
      stamp.textContent = `updated ${new Date().toLocaleTimeString()}`;
    };
    await refresh();
    const loop = () => {
      timer = setTimeout(async () => {
        if (stopped) return;
        try {
          await refresh();
        } catch (e) {
          stamp.textContent = `refresh failed: ${e.message}`;
        }
        if (!stopped) loop();
      }, REFRESH_MS);
    };
    loop();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  },
};
