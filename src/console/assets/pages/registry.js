// Registry: models and versions (MLflow's registry REST API, which the admin port serves too),
// aliases with their history and a rollback button (confirmed first), the model's experiment
// with per-arm requests, errors, latency and tokens side by side, and the review queue
// (/admin/registry/...).
import { api, clear, confirmAction, fmt, h, section, table, toast, badge } from '../lib.js';

const MLFLOW = '/api/2.0/mlflow';
const enc = encodeURIComponent;

export default {
  id: 'registry',
  title: 'Registry',
  available: (ctx) => ctx.me.role === 'admin' && !!ctx.status.components.registry,
  async render(el) {
    const listBox = h('ul', { class: 'list-select', 'aria-label': 'Registered models' });
    const detail = h('div');
    const reviewsBox = h('div');
    el.append(h('div', { class: 'split' }, section('Models', listBox), detail), section('Review queue (pending)', reviewsBox));
    const { registered_models: models = [] } = await api(`${MLFLOW}/registered-models/search?max_results=1000`);
    let selected = null;

    const show = async (m) => {
      selected = m.name;
      for (const b of listBox.querySelectorAll('button')) b.setAttribute('aria-pressed', String(b.dataset.model === m.name));
      const [versions, history, experiment] = await Promise.all([
        api(`${MLFLOW}/model-versions/search?filter=${enc(`name='${m.name.replace(/'/g, "\\'")}'`)}&max_results=1000`).then((r) => r.model_versions || []),
        api(`/admin/registry/models/${enc(m.name)}/history?limit=50`).then((r) => r.history).catch(() => []),
        api(`/admin/registry/models/${enc(m.name)}/experiment`).catch(() => null),
      ]);
      const fresh = await api(`${MLFLOW}/registered-models/get?name=${enc(m.name)}`).then((r) => r.registered_model).catch(() => m);
      const aliases = fresh.aliases || [];
      const rollback = async (alias) => {
        const last = history.find((x) => x.alias === alias);
        const text = last && last.from_version ? `${m.name}@${alias} goes back from version ${last.to_version} to version ${last.from_version}. Traffic follows at once.` : `${m.name}@${alias} goes back to the version before its last move.`;
        if (!(await confirmAction(`Roll back ${m.name}@${alias}?`, text, 'Roll back'))) return;
        try {
          await api(`/admin/registry/models/${enc(m.name)}/aliases/${enc(alias)}/rollback`, { method: 'POST', body: { reason: 'rolled back from the console' } });
          toast(`${m.name}@${alias} rolled back`);
          await show(fresh);
        } catch (e) {
          toast(e.message, 'error');
        }
      };
      const arms = experiment?.stats?.arms || [];
      clear(detail,
        section(`${m.name}`, fresh.description ? h('p', {}, fresh.description) : null,
          h('h3', {}, 'Aliases'),
          table([
            { label: 'Alias', render: (a) => h('code', {}, `${m.name}@${a.alias}`) },
            { label: 'Version', render: (a) => a.version },
            { label: '', render: (a) => h('button', { type: 'button', class: 'small', 'data-rollback': a.alias, onclick: () => rollback(a.alias) }, 'Roll back…') },
          ], aliases, { label: 'Aliases', empty: 'no aliases' }),
          h('h3', {}, 'Versions'),
          table([
            { label: 'Version', render: (v) => v.version },
            { label: 'Aliases', render: (v) => (v.aliases || []).join(', ') || '–' },
            { label: 'Source', render: (v) => v.source || '–' },
            { label: 'Stage', render: (v) => v.current_stage || '–' },
            { label: 'Created', render: (v) => fmt.time(Number(v.creation_timestamp)) },
          ], versions, { label: 'Versions', empty: 'no versions' }),
          h('h3', {}, 'Alias history'),
          table([
            { label: 'When', render: (x) => fmt.time(x.ts_ms) },
            { label: 'Alias', render: (x) => x.alias },
            { label: 'Move', render: (x) => `${x.from_version ?? '∅'} → ${x.to_version ?? '∅'}` },
            { label: 'Who', render: (x) => x.actor },
            { label: 'Reason', render: (x) => x.reason || '–' },
          ], history, { label: 'Alias history', empty: 'no moves yet' })),
        experiment ? section('Experiment', table([
          { label: 'Arm', render: (a) => a.arm },
          { label: 'Target', render: (a) => a.target },
          { label: 'Weight', num: true, render: (a) => a.weight },
          { label: 'Requests', num: true, render: (a) => fmt.int(a.requests) },
          { label: 'Errors', num: true, render: (a) => `${fmt.int(a.errors)} (${fmt.pct(a.error_rate)})` },
          { label: 'p50', num: true, render: (a) => fmt.ms(a.latency_p50_s) },
          { label: 'p99', num: true, render: (a) => fmt.ms(a.latency_p99_s) },
          { label: 'TTFT p50', num: true, render: (a) => fmt.ms(a.ttft_p50_s) },
          { label: 'Prompt tokens', num: true, render: (a) => fmt.int(a.prompt_tokens) },
          { label: 'Completion tokens', num: true, render: (a) => fmt.int(a.completion_tokens) },
        ], arms, { label: 'Experiment arms', empty: 'no traffic yet' }),
        experiment.stats?.shadow ? h('p', {}, `Shadow → ${experiment.stats.shadow.target}: ${experiment.stats.shadow.ok} ok, ${experiment.stats.shadow.error} errors, ${experiment.stats.shadow.failed} failed, ${experiment.stats.shadow.shed} shed; ${experiment.stats.shadow.match} matched, ${experiment.stats.shadow.mismatch} differed.`) : null)
          : section('Experiment', h('p', { class: 'muted' }, 'No experiment on this model.')));
    };

    clear(listBox, models.length ? models.map((m) => h('li', {}, h('button', { type: 'button', 'data-model': m.name, 'aria-pressed': 'false', onclick: () => show(m) }, m.name,
      (m.aliases || []).length ? h('span', { class: 'muted' }, ` · ${(m.aliases || []).map((a) => `@${a.alias}`).join(' ')}`) : null))) : h('li', { class: 'muted' }, 'No registered models.'));
    if (models.length) await show(models[0]);
    else clear(detail, section('Models', h('p', { class: 'muted' }, 'Register one with `infera models create` or MLflow\'s client.')));
    const { reviews = [] } = await api('/admin/registry/reviews?state=pending&limit=50').catch(() => ({}));
    clear(reviewsBox, table([
      { label: 'When', render: (r) => fmt.time(r.ts_ms) },
      { label: 'Model', render: (r) => r.model },
      { label: 'Target', render: (r) => r.target },
      { label: 'Status', render: (r) => badge(r.status, r.status >= 500 ? 'bad' : 'muted') },
      { label: 'Reason', render: (r) => r.reason || '–' },
      { label: 'Request id', render: (r) => h('code', {}, r.request_id) },
    ], reviews, { label: 'Review queue', empty: 'nothing to review' }));
    return () => { selected = null; };
  },
};
