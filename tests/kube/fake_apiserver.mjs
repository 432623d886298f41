#!/usr/bin/env node
// A test Kubernetes API server: Kubernetes' own JSON for the resources Infera's scheduler and
// kubectl use, in memory, on a free loopback port. Node's standard library only.
//
//   node fake_apiserver.mjs --port-file F [--tls-cert C --tls-key K] [--bookmark-ms N]
//                            [--fake-kubelet [--grace-ms-per-second N]] [--log FILE]
//
// Writes the port it bound (127.0.0.1:0) to F once it listens. What it speaks (checked by the real
// kubectl in tests/kube/kubectl_test.sh):
// - discovery: /version, /api (APIVersions), /apis (APIGroupList), /api/v1 and /apis/G/V
//   (APIResourceList); aggregated discovery is answered in the legacy form (application/json),
//   which clients accept as "not aggregated"; /openapi/* is 404 (clients fall back).
// - per resource: list (kind XList, metadata.resourceVersion; labelSelector, fieldSelector with
//   = / == / != on metadata.name, metadata.namespace, spec.nodeName, spec.schedulerName,
//   status.phase), get, create (generateName, dryRun=All), update (PUT, 409 Conflict on a stale
//   metadata.resourceVersion), patch (strategic merge, JSON merge, JSON patch), delete; a Table
//   (meta.k8s.io/v1) when the client asks for one, as kubectl get does.
// - watch: ?watch=true&resourceVersion=N[&allowWatchBookmarks=true][&timeoutSeconds=T]: the
//   events after N, one JSON object {"type","object"} per line; ADDED for every object first when
//   N is absent or "0"; BOOKMARK every --bookmark-ms; an ERROR event with a 410 Expired Status
//   when N is older than the compaction point (as the real server: HTTP 200, then the event).
// - pods/binding (201; 409 when already bound), pods/status, pods/eviction (policy/v1: 201, or
//   429 TooManyRequests when a PodDisruptionBudget allows no disruption; with
//   --grace-ms-per-second the pod first gets a deletionTimestamp and goes after its grace period,
//   scaled), events, leases. PodDisruptionBudgets are served with the status the disruption
//   controller would keep (disruptionsAllowed from the Running pods they select).
// - mutating admission: pods created are sent to every MutatingWebhookConfiguration whose
//   clientConfig has a url (AdmissionReview v1, the caBundle trusted), and the JSONPatch applied.
// Test controls (not Kubernetes): POST /_test/compact (watches older than now get 410),
// POST /_test/drop-watches (closes every open watch), POST /_test/fail-binds (the next bindings
// fail), GET /_test/stats, POST /_test/bulk (many
// objects from a template), POST /_test/dcgm + GET /_test/dcgm/metrics (a DCGM exporter stand-in).
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import crypto from 'node:crypto';

const args = {};
for (let i = 2; i < process.argv.length; i++) {
  const a = process.argv[i];
  if (a.startsWith('--')) {
    const next = process.argv[i + 1];
    if (next === undefined || next.startsWith('--')) {
      args[a.slice(2)] = true;
    } else {
      args[a.slice(2)] = next;
      i++;
    }
  }
}
const bookmarkMs = Number(args['bookmark-ms'] || 1000);
const fakeKubelet = Boolean(args['fake-kubelet']);
// With --fake-kubelet: an evicted pod stops after its terminationGracePeriodSeconds (default 30)
// times this many ms; 0 (the default): it goes at once.
const graceMsPerSecond = Number(args['grace-ms-per-second'] || 0);
const logFile = args.log ? fs.openSync(args.log, 'a') : null;
function log(line) {
  if (logFile !== null) fs.writeSync(logFile, `${new Date().toISOString()} ${line}\n`);
}
// Every Lease write with its holder, on the server's clock: the HA test reads a takeover's timing
// from here (the replicas' own clocks and the test's are not involved).
function logLease(r, key, obj) {
  if (r.name === 'leases') log(`lease ${key} holder ${(obj.spec || {}).holderIdentity || ''}`);
}

// The resources served, as the real server lists them in discovery.
const RESOURCES = [
  { group: '', version: 'v1', name: 'namespaces', kind: 'Namespace', namespaced: false, short: ['ns'],
    verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: '', version: 'v1', name: 'nodes', kind: 'Node', namespaced: false, short: ['no'],
    verbs: ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: '', version: 'v1', name: 'pods', kind: 'Pod', namespaced: true, short: ['po'],
    categories: ['all'],
    verbs: ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: '', version: 'v1', name: 'events', kind: 'Event', namespaced: true, short: ['ev'],
    verbs: ['create', 'delete', 'deletecollection', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: '', version: 'v1', name: 'services', kind: 'Service', namespaced: true, short: ['svc'],
    categories: ['all'], verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: '', version: 'v1', name: 'serviceaccounts', kind: 'ServiceAccount', namespaced: true,
    short: ['sa'], verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: '', version: 'v1', name: 'configmaps', kind: 'ConfigMap', namespaced: true, short: ['cm'],
    verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: '', version: 'v1', name: 'secrets', kind: 'Secret', namespaced: true, short: [],
    verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: 'apps', version: 'v1', name: 'deployments', kind: 'Deployment', namespaced: true,
    short: ['deploy'], categories: ['all'],
    verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: 'apps', version: 'v1', name: 'statefulsets', kind: 'StatefulSet', namespaced: true,
    short: ['sts'], categories: ['all'],
    verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  // A custom resource, as a cluster with the Prometheus operator's CRDs installed serves it.
  { group: 'monitoring.coreos.com', version: 'v1', name: 'podmonitors', kind: 'PodMonitor',
    namespaced: true, short: ['pmon'], verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: 'policy', version: 'v1', name: 'poddisruptionbudgets', kind: 'PodDisruptionBudget',
    namespaced: true, short: ['pdb'], verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: 'coordination.k8s.io', version: 'v1', name: 'leases', kind: 'Lease', namespaced: true,
    short: [], verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: 'rbac.authorization.k8s.io', version: 'v1', name: 'clusterroles', kind: 'ClusterRole',
    namespaced: false, short: [], verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: 'rbac.authorization.k8s.io', version: 'v1', name: 'clusterrolebindings',
    kind: 'ClusterRoleBinding', namespaced: false, short: [],
    verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: 'rbac.authorization.k8s.io', version: 'v1', name: 'roles', kind: 'Role', namespaced: true,
    short: [], verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: 'rbac.authorization.k8s.io', version: 'v1', name: 'rolebindings', kind: 'RoleBinding',
    namespaced: true, short: [], verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
  { group: 'admissionregistration.k8s.io', version: 'v1', name: 'mutatingwebhookconfigurations',
    kind: 'MutatingWebhookConfiguration', namespaced: false, short: [],
    verbs: ['create', 'delete', 'get', 'list', 'patch', 'update', 'watch'] },
];
// Subresources listed in discovery (the real server lists them as "pods/binding" etc.).
const SUBRESOURCES = [
  { group: '', version: 'v1', name: 'pods/binding', kind: 'Binding', namespaced: true, verbs: ['create'] },
  { group: '', version: 'v1', name: 'pods/eviction', kind: 'Eviction', namespaced: true,
    verbs: ['create'], egroup: 'policy', eversion: 'v1' },
  { group: '', version: 'v1', name: 'pods/status', kind: 'Pod', namespaced: true,
    verbs: ['get', 'patch', 'update'] },
  { group: '', version: 'v1', name: 'nodes/status', kind: 'Node', namespaced: false,
    verbs: ['get', 'patch', 'update'] },
  { group: 'apps', version: 'v1', name: 'deployments/status', kind: 'Deployment', namespaced: true,
    verbs: ['get', 'patch', 'update'] },
];

function gv(r) {
  return r.group ? `${r.group}/${r.version}` : r.version;
}
function singular(kind) {
  return kind.toLowerCase();
}

// State: objects per resource ("ns/name" or "name"), one resourceVersion counter for all, the log
// of changes watches replay, and the compaction point.
let rv = 1;
let compactedRv = 0;
const stores = new Map(RESOURCES.map((r) => [r.name + '.' + r.group, new Map()]));
const changes = [];  // {rv, key: resource key, type, object}
const watchers = new Set();
let dcgm = {};  // the DCGM stand-in's series: "ns/pod" -> GPU utilisation percent
let failBinds = { count: 0, status: 500 };
const stats = { watches: 0, binds: 0, bindsFailed: 0, bindConflicts: 0, evictions: 0, evictionsRefused: 0, lists: 0, requests: 0,
  admissions: 0 };

function resKey(r) {
  return r.name + '.' + r.group;
}
function objKey(r, ns, name) {
  return r.namespaced ? `${ns}/${name}` : name;
}
function now() {
  return new Date().toISOString().replace(/\.\d+Z$/, 'Z');
}
function clone(o) {
  return JSON.parse(JSON.stringify(o));
}

function status(code, reason, message, details) {
  const s = { kind: 'Status', apiVersion: 'v1', metadata: {}, status: code < 400 ? 'Success' : 'Failure' };
  if (code >= 400) {
    s.message = message;
    s.reason = reason;
    if (details) s.details = details;
  }
  s.code = code;
  return s;
}
function notFound(r, name) {
  const res = r.group ? `${r.name}.${r.group}` : r.name;
  return status(404, 'NotFound', `${res} "${name}" not found`, { name, group: r.group || undefined, kind: r.name });
}

function record(r, type, obj) {
  changes.push({ rv: Number(obj.metadata.resourceVersion), key: resKey(r), type, object: clone(obj) });
  if (changes.length > 200000) changes.splice(0, 100000);
  for (const w of watchers) w.offer(r, type, obj);
}

function stamp(r, obj) {
  obj.apiVersion = gv(r);
  obj.kind = r.kind;
  obj.metadata.resourceVersion = String(++rv);
}

function put(r, obj, type) {
  stamp(r, obj);
  stores.get(resKey(r)).set(objKey(r, obj.metadata.namespace, obj.metadata.name), obj);
  record(r, type, obj);
  return obj;
}

function remove(r, key) {
  const store = stores.get(resKey(r));
  const obj = store.get(key);
  store.delete(key);
  obj.metadata.resourceVersion = String(++rv);
  record(r, 'DELETED', obj);
  return obj;
}

// --- selectors -------------------------------------------------------------------------------

function parseSelector(text) {
  // "a=b,c!=d,e,!f,g in (x,y)" — the forms kubectl and clients send.
  const out = [];
  if (!text) return out;
  const parts = text.match(/([^,(]+(\([^)]*\))?)/g) || [];
  for (let p of parts) {
    p = p.trim();
    if (!p) continue;
    let m;
    if ((m = p.match(/^(\S+)\s+(in|notin)\s+\(([^)]*)\)$/))) {
      out.push({ key: m[1], op: m[2], values: m[3].split(',').map((s) => s.trim()) });
    } else if ((m = p.match(/^([^!=]+)!=(.*)$/))) {
      out.push({ key: m[1].trim(), op: '!=', values: [m[2].trim()] });
    } else if ((m = p.match(/^([^!=]+)==?(.*)$/))) {
      out.push({ key: m[1].trim(), op: '=', values: [m[2].trim()] });
    } else if (p.startsWith('!')) {
      out.push({ key: p.slice(1), op: '!exists' });
    } else {
      out.push({ key: p, op: 'exists' });
    }
  }
  return out;
}
function matchTerms(terms, get) {
  for (const t of terms) {
    const v = get(t.key);
    if (t.op === '=' && v !== t.values[0]) return false;
    if (t.op === '!=' && v === t.values[0]) return false;
    if (t.op === 'in' && !t.values.includes(v)) return false;
    if (t.op === 'notin' && t.values.includes(v)) return false;
    if (t.op === 'exists' && v === undefined) return false;
    if (t.op === '!exists' && v !== undefined) return false;
  }
  return true;
}
function fieldValue(obj, path) {
  let cur = obj;
  for (const part of path.split('.')) {
    if (cur === undefined || cur === null) return undefined;
    cur = cur[part];
  }
  if (cur === undefined && (path === 'spec.nodeName' || path === 'spec.schedulerName' || path === 'status.phase')) {
    return '';
  }
  return cur === undefined ? undefined : String(cur);
}
function selects(q, obj) {
  const labels = parseSelector(q.get('labelSelector'));
  const fields = parseSelector(q.get('fieldSelector'));
  const l = obj.metadata.labels || {};
  return matchTerms(labels, (k) => l[k]) && matchTerms(fields, (k) => fieldValue(obj, k));
}

// --- patches ---------------------------------------------------------------------------------

// Strategic merge for the fields Kubernetes marks with patchMergeKey; other lists are replaced.
const MERGE_KEYS = { conditions: 'type', containers: 'name', env: 'name', volumes: 'name',
  ports: 'containerPort', tolerations: null, initContainers: 'name', volumeMounts: 'mountPath' };
function strategicMerge(target, patch) {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out = target && typeof target === 'object' && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (k.startsWith('$')) continue;
    if (v === null) {
      delete out[k];
    } else if (Array.isArray(v) && MERGE_KEYS[k] && Array.isArray(out[k])) {
      const key = MERGE_KEYS[k];
      const merged = out[k].map((e) => clone(e));
      for (const item of v) {
        const i = merged.findIndex((e) => e[key] === item[key]);
        if (i >= 0) merged[i] = strategicMerge(merged[i], item);
        else merged.push(item);
      }
      out[k] = merged;
    } else if (typeof v === 'object' && !Array.isArray(v)) {
      out[k] = strategicMerge(out[k], v);
    } else {
      out[k] = v;
    }
  }
  return out;
}
function mergePatch(target, patch) {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch)) return patch;
  const out = target && typeof target === 'object' && !Array.isArray(target) ? { ...target } : {};
  for (const [k, v] of Object.entries(patch)) {
    if (v === null) delete out[k];
    else out[k] = mergePatch(out[k], v);
  }
  return out;
}
function pointer(path) {
  return path.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));
}
function jsonPatch(doc, ops) {
  doc = clone(doc);
  for (const op of ops) {
    const parts = pointer(op.path);
    const last = parts.pop();
    let parent = doc;
    for (const p of parts) {
      if (parent[p] === undefined) throw new Error(`path ${op.path}: missing ${p}`);
      parent = parent[p];
    }
    if (op.op === 'add' || op.op === 'replace') {
      if (Array.isArray(parent)) {
        if (last === '-') parent.push(op.value);
        else if (op.op === 'add') parent.splice(Number(last), 0, op.value);
        else parent[Number(last)] = op.value;
      } else {
        if (op.op === 'replace' && !(last in parent)) throw new Error(`path ${op.path}: missing`);
        parent[last] = op.value;
      }
    } else if (op.op === 'remove') {
      if (Array.isArray(parent)) parent.splice(Number(last), 1);
      else delete parent[last];
    } else if (op.op === 'test') {
      if (JSON.stringify(parent[last]) !== JSON.stringify(op.value)) throw new Error(`test failed at ${op.path}`);
    } else {
      throw new Error(`unsupported op ${op.op}`);
    }
  }
  return doc;
}

// --- tables (kubectl get) --------------------------------------------------------------------

function age(ts) {
  if (!ts) return '<unknown>';
  const s = Math.max(0, Math.floor((Date.now() - Date.parse(ts)) / 1000));
  if (s < 120) return `${s}s`;
  if (s < 7200) return `${Math.floor(s / 60)}m`;
  return `${Math.floor(s / 3600)}h`;
}
function tableColumns(r) {
  const col = (name, description, format = '') => ({ name, type: 'string', format, description, priority: 0 });
  if (r.name === 'pods') {
    return [col('Name', 'Name of the pod', 'name'), col('Status', 'Phase'), col('Node', 'Node the pod is bound to'),
      col('Age', 'Time since creation')];
  }
  if (r.name === 'nodes') {
    return [col('Name', 'Name of the node', 'name'), col('GPUs', 'Allocatable nvidia.com/gpu'), col('Age', 'Time since creation')];
  }
  return [col('Name', 'Name of the object', 'name'), col('Age', 'Time since creation')];
}
function tableRow(r, obj) {
  const m = obj.metadata;
  let cells;
  if (r.name === 'pods') {
    cells = [m.name, (obj.status && obj.status.phase) || 'Pending', (obj.spec && obj.spec.nodeName) || '<none>',
      age(m.creationTimestamp)];
  } else if (r.name === 'nodes') {
    const alloc = (obj.status && obj.status.allocatable) || {};
    cells = [m.name, alloc['nvidia.com/gpu'] || '0', age(m.creationTimestamp)];
  } else {
    cells = [m.name, age(m.creationTimestamp)];
  }
  const meta = { name: m.name, uid: m.uid, resourceVersion: m.resourceVersion, creationTimestamp: m.creationTimestamp };
  if (m.namespace) meta.namespace = m.namespace;
  if (m.labels) meta.labels = m.labels;
  return { cells, object: { kind: 'PartialObjectMetadata', apiVersion: 'meta.k8s.io/v1', metadata: meta } };
}
function wantsTable(req) {
  const a = req.headers.accept || '';
  return a.includes('as=Table') && a.includes('g=meta.k8s.io');
}
function table(r, objs, listRv) {
  return { kind: 'Table', apiVersion: 'meta.k8s.io/v1', metadata: { resourceVersion: listRv },
    columnDefinitions: tableColumns(r), rows: objs.map((o) => tableRow(r, o)) };
}

// --- HTTP ------------------------------------------------------------------------------------

function send(res, code, body, extra = {}) {
  const text = JSON.stringify(body);
  res.writeHead(code, { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text),
    'Cache-Control': 'no-cache, private', ...extra });
  res.end(text);
}

function readBody(req) {
  return new Promise((resolve, reject) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

function discovery(path, req, res) {
  const host = req.headers.host || '127.0.0.1';
  if (path === '/version') {
    return send(res, 200, { major: '1', minor: '32', gitVersion: 'v1.32.0-infera-test', gitCommit: '0000000',
      gitTreeState: 'clean', buildDate: '2026-01-01T00:00:00Z', goVersion: 'go1.23.0', compiler: 'gc',
      platform: 'linux/amd64' }), true;
  }
  if (path === '/api') {
    return send(res, 200, { kind: 'APIVersions', versions: ['v1'],
      serverAddressByClientCIDRs: [{ clientCIDR: '0.0.0.0/0', serverAddress: host }] }), true;
  }
  const groups = [...new Set(RESOURCES.filter((r) => r.group).map((r) => r.group))];
  if (path === '/apis') {
    return send(res, 200, { kind: 'APIGroupList', apiVersion: 'v1', groups: groups.map((g) => ({
      name: g, versions: [{ groupVersion: `${g}/v1`, version: 'v1' }],
      preferredVersion: { groupVersion: `${g}/v1`, version: 'v1' } })) }), true;
  }
  let m;
  if (path === '/api/v1' || ((m = path.match(/^\/apis\/([^/]+)\/([^/]+)$/)) && groups.includes(m[1]))) {
    const group = m ? m[1] : '';
    const resources = [];
    for (const r of RESOURCES.filter((x) => x.group === group)) {
      const e = { name: r.name, singularName: singular(r.kind), namespaced: r.namespaced, kind: r.kind, verbs: r.verbs };
      if (r.short.length) e.shortNames = r.short;
      if (r.categories) e.categories = r.categories;
      e.storageVersionHash = crypto.createHash('sha256').update(r.name + r.group).digest('base64').slice(0, 11);
      resources.push(e);
    }
    for (const s of SUBRESOURCES.filter((x) => x.group === group)) {
      const e = { name: s.name, singularName: '', namespaced: s.namespaced, kind: s.kind, verbs: s.verbs };
      if (s.egroup) {
        e.group = s.egroup;
        e.version = s.eversion;
      }
      resources.push(e);
    }
    return send(res, 200, { kind: 'APIResourceList', apiVersion: 'v1', groupVersion: group ? `${group}/v1` : 'v1',
      resources }), true;
  }
  if (path.startsWith('/apis/') && path.split('/').length === 3 && groups.includes(path.split('/')[2])) {
    const g = path.split('/')[2];
    return send(res, 200, { kind: 'APIGroup', apiVersion: 'v1', name: g, versions: [{ groupVersion: `${g}/v1`, version: 'v1' }],
      preferredVersion: { groupVersion: `${g}/v1`, version: 'v1' } }), true;
  }
  return false;
}

// Parses /api/v1/... or /apis/G/V/... into {r, ns, name, sub}; null when it names no resource.
function route(path) {
  const seg = path.split('/').filter((s) => s.length > 0);
  let group = '';
  let rest;
  if (seg[0] === 'api' && seg[1] === 'v1') {
    rest = seg.slice(2);
  } else if (seg[0] === 'apis' && seg.length >= 3) {
    group = seg[1];
    rest = seg.slice(3);
  } else {
    return null;
  }
  const find = (name) => RESOURCES.find((r) => r.group === group && r.name === name);
  let ns = '';
  if (rest[0] === 'namespaces' && rest.length >= 3 && find(rest[2]) && find(rest[2]).namespaced) {
    ns = rest[1];
    rest = rest.slice(2);
  }
  const r = find(rest[0]);
  if (!r) return null;
  return { r, ns, name: rest[1] || '', sub: rest[2] || '' };
}

class Watcher {
  constructor(res, r, ns, q, asTable) {
    this.asTable = asTable;
    this.res = res;
    this.r = r;
    this.ns = ns;
    this.q = q;
    this.closed = false;
  }
  matches(r, obj) {
    if (resKey(r) !== resKey(this.r)) return false;
    if (this.ns && obj.metadata.namespace !== this.ns) return false;
    return selects(this.q, obj);
  }
  write(type, obj) {
    if (this.closed) return;
    // kubectl get --watch asks for Tables: each event's object is then a one-row Table.
    const o = this.asTable && type !== 'ERROR' && type !== 'BOOKMARK' ? table(this.r, [obj], obj.metadata.resourceVersion) : obj;
    this.res.write(JSON.stringify({ type, object: o }) + '\n');
  }
  offer(r, type, obj) {
    if (this.matches(r, obj)) this.write(type, obj);
  }
  close() {
    if (this.closed) return;
    this.closed = true;
    watchers.delete(this);
    clearInterval(this.bookmarks);
    clearTimeout(this.timeout);
    this.res.end();
  }
}

function startWatch(req, res, r, ns, q) {
  stats.watches++;
  const from = q.get('resourceVersion');
  res.writeHead(200, { 'Content-Type': 'application/json', 'Transfer-Encoding': 'chunked',
    'Cache-Control': 'no-cache, private' });
  const w = new Watcher(res, r, ns, q, wantsTable(req));
  if (from && from !== '0' && Number(from) < compactedRv) {
    w.write('ERROR', status(410, 'Expired', `too old resource version: ${from} (${compactedRv})`));
    w.close();
    return;
  }
  if (!from || from === '0') {
    for (const obj of stores.get(resKey(r)).values()) w.offer(r, 'ADDED', obj);
  } else {
    for (const c of changes) {
      if (c.rv > Number(from) && c.key === resKey(r) && w.matches(r, c.object)) w.write(c.type, c.object);
    }
  }
  watchers.add(w);
  if (q.get('allowWatchBookmarks') === 'true') {
    w.bookmarks = setInterval(() => {
      w.write('BOOKMARK', { kind: r.kind, apiVersion: gv(r), metadata: { resourceVersion: String(rv) } });
    }, bookmarkMs);
  }
  const timeout = Number(q.get('timeoutSeconds') || 0);
  if (timeout > 0) w.timeout = setTimeout(() => w.close(), timeout * 1000);
  req.on('close', () => w.close());
}

// A label selector (matchLabels and matchExpressions) against a pod's labels; an empty selector
// selects every pod, a missing one none (policy/v1).
function pdbSelects(pdb, pod) {
  const sel = pdb.spec && pdb.spec.selector;
  if (!sel || pod.metadata.namespace !== pdb.metadata.namespace) return false;
  const labels = pod.metadata.labels || {};
  if (!Object.entries(sel.matchLabels || {}).every(([k, v]) => labels[k] === v)) return false;
  return (sel.matchExpressions || []).every((e) => {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const inValues = has && (e.values || []).includes(labels[e.key]);
    return { In: inValues, NotIn: !inValues, Exists: has, DoesNotExist: !has }[e.operator] ?? false;
  });
}

// What the disruption controller keeps in a PDB's status (healthy = Running pods it selects).
function pdbStatus(pdb) {
  const pods = [...stores.get('pods.').values()].filter((p) => pdbSelects(pdb, p));
  const healthy = pods.filter((p) => p.status && p.status.phase === 'Running').length;
  const desired = pdb.spec.minAvailable !== undefined ? Number(pdb.spec.minAvailable)
    : pods.length - Number(pdb.spec.maxUnavailable || 0);
  return { observedGeneration: 1, currentHealthy: healthy, desiredHealthy: desired, expectedPods: pods.length,
    disruptionsAllowed: Math.max(0, healthy - desired) };
}

function withStatus(r, obj) {
  return r.name === 'poddisruptionbudgets' ? { ...obj, status: pdbStatus(obj) } : obj;
}

function pdbAllows(pod) {
  for (const pdb of stores.get('poddisruptionbudgets.policy').values()) {
    if (!pdbSelects(pdb, pod)) continue;
    const st = pdbStatus(pdb);
    if (st.disruptionsAllowed <= 0) {
      return { pdb, message: `The disruption budget ${pdb.metadata.name} needs ${st.desiredHealthy} healthy pods and has ${st.currentHealthy} currently` };
    }
  }
  return null;
}

async function admit(obj, ns, userName) {
  // Mutating webhooks with a url clientConfig, for pods (what the scheduler's webhook needs).
  let out = obj;
  for (const cfg of stores.get('mutatingwebhookconfigurations.admissionregistration.k8s.io').values()) {
    for (const wh of cfg.webhooks || []) {
      const cc = wh.clientConfig || {};
      if (!cc.url) continue;
      const rules = wh.rules || [];
      const forPods = rules.some((ru) => (ru.resources || []).some((x) => x === 'pods' || x === '*') &&
        (ru.operations || []).some((o) => o === 'CREATE' || o === '*'));
      if (!forPods) continue;
      const uid = crypto.randomUUID();
      const review = { apiVersion: 'admission.k8s.io/v1', kind: 'AdmissionReview', request: {
        uid, kind: { group: '', version: 'v1', kind: 'Pod' }, resource: { group: '', version: 'v1', resource: 'pods' },
        requestKind: { group: '', version: 'v1', kind: 'Pod' }, requestResource: { group: '', version: 'v1', resource: 'pods' },
        name: out.metadata.name || '', namespace: ns, operation: 'CREATE',
        userInfo: { username: userName, groups: ['system:authenticated'] }, object: out, oldObject: null,
        dryRun: false, options: { kind: 'CreateOptions', apiVersion: 'meta.k8s.io/v1' } } };
      stats.admissions++;
      let answer;
      try {
        answer = await postJson(cc.url, review, cc.caBundle ? Buffer.from(cc.caBundle, 'base64').toString() : undefined,
          (wh.timeoutSeconds || 10) * 1000);
      } catch (e) {
        if ((wh.failurePolicy || 'Fail') === 'Ignore') continue;
        throw { code: 500, reason: 'InternalError', message: `Internal error occurred: failed calling webhook "${wh.name}": ${e.message}` };
      }
      const resp = answer.response || {};
      if (resp.uid !== uid) {
        throw { code: 500, reason: 'InternalError', message: `webhook "${wh.name}" answered uid ${resp.uid}, expected ${uid}` };
      }
      if (!resp.allowed) {
        const st = resp.status || {};
        throw { code: st.code || 400, reason: st.reason || 'BadRequest', message: `admission webhook "${wh.name}" denied the request: ${st.message || ''}` };
      }
      if (resp.patch) {
        if (resp.patchType !== 'JSONPatch') throw { code: 500, reason: 'InternalError', message: `webhook "${wh.name}": patchType ${resp.patchType}` };
        out = jsonPatch(out, JSON.parse(Buffer.from(resp.patch, 'base64').toString('utf8')));
      }
    }
  }
  return out;
}

function postJson(url, body, ca, timeoutMs) {
  return new Promise((resolve, reject) => {
    const u = new URL(url);
    const lib = u.protocol === 'https:' ? https : http;
    const text = JSON.stringify(body);
    const req = lib.request(u, { method: 'POST', ca, timeout: timeoutMs,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(text) } }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => {
        if (res.statusCode !== 200) return reject(new Error(`HTTP ${res.statusCode}`));
        try {
          resolve(JSON.parse(Buffer.concat(chunks).toString('utf8')));
        } catch (e) {
          reject(e);
        }
      });
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(text);
  });
}

async function subresource(req, res, rt, q, body) {
  const { r, ns, name, sub } = rt;
  const store = stores.get(resKey(r));
  const key = objKey(r, ns, name);
  const obj = store.get(key);
  if (!obj) return send(res, 404, notFound(r, name));
  if (r.name === 'pods' && sub === 'binding' && req.method === 'POST') {
    if (failBinds.count > 0) {
      failBinds.count--;
      stats.bindsFailed++;
      return send(res, failBinds.status, status(failBinds.status, 'InternalError', 'Internal error occurred: injected by /_test/fail-binds'));
    }
    const b = JSON.parse(body);
    if (obj.spec.nodeName) {
      stats.bindConflicts++;
      return send(res, 409, status(409, 'Conflict', `Operation cannot be fulfilled on pods/binding "${name}": pod ${name} is already assigned to node "${obj.spec.nodeName}"`, { name, kind: 'pods/binding' }));
    }
    const target = b.target || {};
    if (!target.name) return send(res, 400, status(400, 'BadRequest', 'target.name: Required value'));
    const updated = clone(obj);
    updated.spec.nodeName = target.name;
    updated.status = updated.status || {};
    updated.status.conditions = (updated.status.conditions || []).filter((c) => c.type !== 'PodScheduled');
    updated.status.conditions.push({ type: 'PodScheduled', status: 'True', lastProbeTime: null, lastTransitionTime: now() });
    if (fakeKubelet) {
      updated.status.phase = 'Running';
      updated.status.startTime = now();
    }
    put(r, updated, 'MODIFIED');
    stats.binds++;
    log(`bind ${ns}/${name} -> ${target.name}`);
    return send(res, 201, status(201));
  }
  if (r.name === 'pods' && sub === 'eviction' && req.method === 'POST') {
    const e = JSON.parse(body);
    if (e.kind !== 'Eviction') return send(res, 400, status(400, 'BadRequest', 'expected an Eviction'));
    const refusal = pdbAllows(obj);
    if (refusal) {
      stats.evictionsRefused++;
      return send(res, 429, status(429, 'TooManyRequests', "Cannot evict pod as it would violate the pod's disruption budget.",
        { causes: [{ reason: 'DisruptionBudget', message: refusal.message }] }));
    }
    stats.evictions++;
    log(`evict ${ns}/${name}`);
    const grace = obj.spec.terminationGracePeriodSeconds ?? 30;
    if (fakeKubelet && graceMsPerSecond > 0 && grace > 0 && obj.spec.nodeName) {
      // As the real server and kubelet: the pod is marked (deletionTimestamp) and keeps its node
      // while it stops, then goes.
      if (!obj.metadata.deletionTimestamp) {
        const marked = clone(obj);
        marked.metadata.deletionTimestamp = new Date(Date.now() + grace * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
        marked.metadata.deletionGracePeriodSeconds = grace;
        put(r, marked, 'MODIFIED');
        const uid = obj.metadata.uid;
        setTimeout(() => {
          const current = store.get(key);
          if (current && current.metadata.uid === uid) remove(r, key);
        }, grace * graceMsPerSecond);
      }
    } else {
      remove(r, key);
    }
    return send(res, 201, status(201));
  }
  if (sub === 'status') {
    if (req.method === 'GET') return send(res, 200, obj);
    return update(req, res, rt, q, body, true);
  }
  return send(res, 404, status(404, 'NotFound', `the server could not find the requested resource`));
}

function update(req, res, rt, q, body, statusOnly) {
  const { r, ns, name } = rt;
  const store = stores.get(resKey(r));
  const key = objKey(r, ns, name);
  const obj = store.get(key);
  const ctype = (req.headers['content-type'] || '').split(';')[0];
  let next;
  try {
    const input = JSON.parse(body);
    if (req.method === 'PUT') {
      if (!obj) return send(res, 404, notFound(r, name));
      if (input.metadata && input.metadata.resourceVersion && input.metadata.resourceVersion !== obj.metadata.resourceVersion) {
        const res1 = r.group ? `${r.name}.${r.group}` : r.name;
        return send(res, 409, status(409, 'Conflict', `Operation cannot be fulfilled on ${res1} "${name}": the object has been modified; please apply your changes to the latest version and try again`, { name, group: r.group || undefined, kind: r.name }));
      }
      next = input;
    } else {
      if (!obj) return send(res, 404, notFound(r, name));
      if (ctype === 'application/json-patch+json') next = jsonPatch(obj, input);
      else if (ctype === 'application/merge-patch+json') next = mergePatch(clone(obj), input);
      else if (ctype === 'application/strategic-merge-patch+json') next = strategicMerge(clone(obj), input);
      else return send(res, 415, status(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json`));
    }
  } catch (e) {
    return send(res, 422, status(422, 'Invalid', `${r.kind} "${name}" is invalid: ${e.message}`));
  }
  next.metadata = next.metadata || {};
  // Identity fields stay the server's.
  for (const f of ['uid', 'creationTimestamp', 'name', 'namespace']) {
    if (obj.metadata[f] !== undefined) next.metadata[f] = obj.metadata[f];
  }
  if (statusOnly) {
    const merged = clone(obj);
    merged.status = next.status;
    next = merged;
  } else if (r.name === 'pods') {
    next.status = obj.status;  // the main resource does not write status
  }
  if (q.get('dryRun') === 'All') {
    next.apiVersion = gv(r);
    next.kind = r.kind;
    return send(res, 200, next);
  }
  put(r, next, 'MODIFIED');
  logLease(r, key, next);
  return send(res, 200, next);
}

async function create(req, res, rt, q, body) {
  const { r, ns } = rt;
  let obj;
  try {
    obj = JSON.parse(body);
  } catch (e) {
    return send(res, 400, status(400, 'BadRequest', `the object provided is unrecognized: ${e.message}`));
  }
  obj.metadata = obj.metadata || {};
  if (r.namespaced) {
    if (obj.metadata.namespace && obj.metadata.namespace !== ns) {
      return send(res, 400, status(400, 'BadRequest', 'the namespace of the provided object does not match the namespace sent on the request'));
    }
    obj.metadata.namespace = ns;
  }
  if (!obj.metadata.name && obj.metadata.generateName) {
    obj.metadata.name = obj.metadata.generateName + crypto.randomBytes(3).toString('hex').slice(0, 5);
  }
  if (!obj.metadata.name) {
    return send(res, 422, status(422, 'Invalid', `${r.kind} "" is invalid: metadata.name: Required value: name or generateName is required`));
  }
  if (r.namespaced && !stores.get('namespaces.').has(ns) && ns !== 'default' && ns !== 'kube-system') {
    return send(res, 404, status(404, 'NotFound', `namespaces "${ns}" not found`, { name: ns, kind: 'namespaces' }));
  }
  const key = objKey(r, ns, obj.metadata.name);
  if (stores.get(resKey(r)).has(key)) {
    const res1 = r.group ? `${r.name}.${r.group}` : r.name;
    return send(res, 409, status(409, 'AlreadyExists', `${res1} "${obj.metadata.name}" already exists`, { name: obj.metadata.name, group: r.group || undefined, kind: r.name }));
  }
  if (r.name === 'pods') {
    try {
      obj = await admit(obj, ns, req.headers['x-remote-user'] || 'kubernetes-admin');
    } catch (e) {
      return send(res, e.code || 500, status(e.code || 500, e.reason || 'InternalError', e.message || String(e)));
    }
    obj.spec = obj.spec || {};
    if (!obj.spec.schedulerName) obj.spec.schedulerName = 'default-scheduler';
    if (!obj.spec.serviceAccountName) obj.spec.serviceAccountName = 'default';
    // A pod created already bound runs at once with --fake-kubelet, as its kubelet would start it.
    obj.status = { phase: fakeKubelet && obj.spec.nodeName ? 'Running' : 'Pending', qosClass: 'BestEffort' };
  }
  obj.metadata.uid = crypto.randomUUID();
  obj.metadata.creationTimestamp = now();
  if (r.name === 'namespaces') obj.status = { phase: 'Active' };
  if (q.get('dryRun') === 'All') {
    obj.apiVersion = gv(r);
    obj.kind = r.kind;
    return send(res, 201, obj);
  }
  put(r, obj, 'ADDED');
  log(`create ${r.name} ${key}`);
  logLease(r, key, obj);
  return send(res, 201, obj);
}

async function handle(req, res) {
  stats.requests++;
  const url = new URL(req.url, 'http://x');
  const path = url.pathname;
  const q = url.searchParams;
  const body = await readBody(req);
  log(`${req.method} ${req.url} ${req.headers['content-type'] || ''} ${req.headers.accept || ''}`);
  if (req.method === 'PATCH') log(`  patch ${body}`);
  // JSON only, as a server without protobuf would: clients fall back to JSON on a 415.
  if ((req.headers['content-type'] || '').includes('protobuf')) {
    return send(res, 415, status(415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json, application/yaml`));
  }
  if (path === '/_test/compact' && req.method === 'POST') {
    compactedRv = rv + 1;
    return send(res, 200, { compactedRv });
  }
  if (path === '/_test/fail-binds' && req.method === 'POST') {
    // The next `count` pods/binding calls answer `status` (default 500) and bind nothing.
    const b = JSON.parse(body || '{}');
    failBinds = { count: Number(b.count || 1), status: Number(b.status || 500) };
    return send(res, 200, failBinds);
  }
  if (path === '/_test/drop-watches' && req.method === 'POST') {
    const n = watchers.size;
    for (const w of [...watchers]) {
      w.closed = true;
      watchers.delete(w);
      clearInterval(w.bookmarks);
      clearTimeout(w.timeout);
      w.res.destroy();
    }
    return send(res, 200, { dropped: n });
  }
  if (path === '/_test/bulk' && req.method === 'POST') {
    // Loads many objects at once for scale runs: {resource, group, namespace, prefix, count,
    // template}; names are PREFIX-0..N-1. Each is created (and watched) as by a POST.
    const b = JSON.parse(body);
    const r = RESOURCES.find((x) => x.name === b.resource && x.group === (b.group || ''));
    if (!r) return send(res, 404, status(404, 'NotFound', `no resource ${b.resource}`));
    for (let i = 0; i < b.count; i++) {
      const obj = clone(b.template);
      obj.metadata = obj.metadata || {};
      obj.metadata.name = `${b.prefix}-${i}`;
      if (r.namespaced) obj.metadata.namespace = b.namespace;
      obj.metadata.uid = crypto.randomUUID();
      obj.metadata.creationTimestamp = now();
      if (r.name === 'pods') {
        obj.spec.schedulerName = obj.spec.schedulerName || 'default-scheduler';
        obj.status = { phase: 'Pending' };
      }
      if (obj.metadata.labels && obj.metadata.labels['kubernetes.io/hostname'] !== undefined) {
        obj.metadata.labels['kubernetes.io/hostname'] = obj.metadata.name;
      }
      put(r, obj, 'ADDED');
    }
    return send(res, 200, { created: b.count, resourceVersion: rv });
  }
  // A stand-in for NVIDIA's dcgm-exporter (its metric and label names), for a real Prometheus to
  // scrape: POST /_test/dcgm {"ns/pod": utilisation percent, ...}, GET /_test/dcgm/metrics.
  if (path === '/_test/dcgm' && req.method === 'POST') {
    dcgm = JSON.parse(body);
    return send(res, 200, { series: Object.keys(dcgm).length });
  }
  if (path === '/_test/dcgm/metrics' && req.method === 'GET') {
    let text = '# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n';
    let gpu = 0;
    for (const [key, value] of Object.entries(dcgm)) {
      const [ns, pod] = key.split('/');
      const p = stores.get('pods.').get(key);
      const host = (p && p.spec.nodeName) || 'unknown';
      text += `DCGM_FI_DEV_GPU_UTIL{gpu="${gpu}",UUID="GPU-${String(gpu).padStart(8, '0')}-0000-0000-0000-000000000000",device="nvidia${gpu}",modelName="NVIDIA A10",Hostname="${host}",DCGM_FI_DRIVER_VERSION="550.54.15",container="${pod}",namespace="${ns}",pod="${pod}"} ${value}\n`;
      gpu++;
    }
    res.writeHead(200, { 'Content-Type': 'text/plain; version=0.0.4' });
    return res.end(text);
  }
  if (path === '/_test/stats') return send(res, 200, { ...stats, resourceVersion: rv, openWatches: watchers.size });
  if (req.method === 'GET' && discovery(path, req, res)) return;
  if (path.startsWith('/openapi/')) return send(res, 404, status(404, 'NotFound', 'the server could not find the requested resource'));
  const rt = route(path);
  if (!rt) return send(res, 404, status(404, 'NotFound', 'the server could not find the requested resource'));
  const { r, ns, name, sub } = rt;
  if (sub) return subresource(req, res, rt, q, body);
  const store = stores.get(resKey(r));
  if (!name) {
    if (req.method === 'GET') {
      if (q.get('watch') === 'true' || q.get('watch') === '1') return startWatch(req, res, r, ns, q);
      stats.lists++;
      const items = [...store.values()].filter((o) => (!ns || o.metadata.namespace === ns) && selects(q, o));
      items.sort((a, b) => (a.metadata.namespace || '').localeCompare(b.metadata.namespace || '') || a.metadata.name.localeCompare(b.metadata.name));
      if (wantsTable(req)) return send(res, 200, table(r, items, String(rv)));
      // List items carry no kind/apiVersion, as the real server's.
      const list = items.map((o) => {
        const c = clone(withStatus(r, o));
        delete c.kind;
        delete c.apiVersion;
        return c;
      });
      return send(res, 200, { kind: `${r.kind}List`, apiVersion: gv(r), metadata: { resourceVersion: String(rv) }, items: list });
    }
    if (req.method === 'POST') return create(req, res, rt, q, body);
    return send(res, 405, status(405, 'MethodNotAllowed', `the server does not allow this method on the requested resource`));
  }
  const key = objKey(r, ns, name);
  const obj = store.get(key);
  if (req.method === 'GET') {
    if (!obj) return send(res, 404, notFound(r, name));
    if (wantsTable(req)) return send(res, 200, table(r, [obj], obj.metadata.resourceVersion));
    return send(res, 200, withStatus(r, obj));
  }
  if (req.method === 'PUT' || req.method === 'PATCH') return update(req, res, rt, q, body, false);
  if (req.method === 'DELETE') {
    if (!obj) return send(res, 404, notFound(r, name));
    if (q.get('dryRun') === 'All') return send(res, 200, obj);
    const gone = remove(r, key);
    log(`delete ${r.name} ${key}`);
    return send(res, 200, gone);
  }
  return send(res, 405, status(405, 'MethodNotAllowed', 'the server does not allow this method on the requested resource'));
}

function onRequest(req, res) {
  handle(req, res).catch((e) => {
    log(`error ${e.stack || e}`);
    if (!res.headersSent) send(res, 500, status(500, 'InternalError', String(e.message || e)));
    else res.destroy();
  });
}

const server = args['tls-cert']
  ? https.createServer({ cert: fs.readFileSync(args['tls-cert']), key: fs.readFileSync(args['tls-key']) }, onRequest)
  : http.createServer(onRequest);
server.keepAliveTimeout = 60000;
server.listen(0, '127.0.0.1', () => {
  const port = server.address().port;
  if (args['port-file']) {
    fs.writeFileSync(args['port-file'] + '.tmp', String(port));
    fs.renameSync(args['port-file'] + '.tmp', args['port-file']);
  }
  log(`listening on 127.0.0.1:${port}`);
});
process.on('SIGTERM', () => process.exit(0));
