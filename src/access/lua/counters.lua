-- Shared by the three scripts below (each is counters.lua followed by its own file): the
-- counters' layout in Redis and the functions that read and update them.
-- A minute counter is a hash K of one-second buckets ("<unix second>" -> amount) plus a summary:
-- 'B' and five little-endian doubles (total, oldest live second, current second, second the hash's
-- TTL was last renewed, current second's amount; integers, exact as doubles). The current second's
-- bucket lives in the summary; it goes into the hash when the second is over. Summaries are fields
-- (named K) of one hash per minute, infera:rl:sum:<unix minute> (per tag on a cluster): a call reads its counters'
-- summaries with one HMGET (a second one, of the previous minute's hash, for counters not written
-- yet this minute) and writes them with one HSET, however many counters and admissions it carries.
-- The same hash holds the markers of the reserve calls made in its minute (field
-- infera:rl:call:<id>, see kReserveBody), read and written by those same two commands. A minute's
-- summaries are read until the end of the next minute, its markers by cancels for two minutes
-- more (a cancel is retried for up to 100 s): the call that creates it sets it to expire at the
-- end of minute m + 3 and unlinks the hash of minute m - 3 (Redis frees a big unlinked hash in the
-- background, where an expiry would free it in its main thread). (An earlier
-- version kept each summary at K:s, in binary or as text "<total> <oldest> <current> <ttl>
-- [<amount>]"; a counter found in neither hash is still read from there.) The first call in a new
-- second moves the finished second into the hash, drops the buckets that left the window and
-- recounts (HINCRBY, HGETALL, HDEL, EXPIRE: once per second per counter). A day/month counter is an
-- integer at K.
-- On a Redis Cluster every key of a call carries one hash tag (infera:rl:{<tag>}<name>) and so do
-- the hashes and markers the call touches beside its KEYS: infera:rl:sum:{<tag>}:<minute> and
-- infera:rl:adj:{<tag>}:<id>, all in the slot of the call's counters. With one Redis the keys
-- have no tag and these names are as they always were.
local call_tag = string.match(KEYS[1] or '', '^infera:rl:({[^}]*})')
local tag_part = call_tag and (call_tag .. ':') or ''
local function summary_hash(minute)
  return 'infera:rl:sum:' .. tag_part .. minute
end
-- Each counter's raw value (false if none): a minute counter's summary from this minute's hash,
-- else the previous minute's, else an earlier version's K:s key; a period counter's integer.
-- With `extra` (a field name), also that field of this minute's hash (false if none). The third
-- result is true when this minute's hash held none of the counters (so it may not exist yet).
local function summaries(keys, minute_flag, now, extra)
  local out, names, at, fields, fat = {}, {}, {}, {}, {}
  for i = 1, #keys do
    out[i] = false
    if minute_flag(i) then
      fields[#fields + 1] = keys[i]
      fat[#fat + 1] = i
    else
      names[#names + 1] = keys[i]
      at[#at + 1] = i
    end
  end
  local minute = math.floor(now / 60)
  local extra_value, fresh = false, false
  if extra then
    fields[#fields + 1] = extra
    fat[#fat + 1] = 0
  end
  for back = 0, 1 do
    if #fields == 0 then break end
    local got = redis.call('HMGET', summary_hash(minute - back), unpack(fields))
    local missed, mat = {}, {}
    for j = 1, #fields do
      if fat[j] == 0 then
        extra_value = got[j]
      elseif got[j] then
        out[fat[j]] = got[j]
      else
        missed[#missed + 1] = fields[j]
        mat[#mat + 1] = fat[j]
      end
    end
    -- Nothing found: this minute's hash may not exist yet (the call's marker is never found).
    if back == 0 then fresh = #missed == #fields - (extra and 1 or 0) end
    fields, fat = missed, mat
  end
  for j = 1, #fields do
    names[#names + 1] = fields[j] .. ':s'
    at[#at + 1] = fat[j]
  end
  if #names > 0 then
    local got = redis.call('MGET', unpack(names))
    for j = 1, #names do out[at[j]] = got[j] end
  end
  return out, extra_value, fresh
end
local function load(key, raw, minute, now)
  if not minute then
    local n = tonumber(raw or false)
    return {n = n or 0, exists = n ~= nil}
  end
  local s = {exists = raw ~= false and raw ~= nil, total = 0, oldest = now, clean = -1, add = 0, ttl = -1, cur = 0}
  if s.exists then
    if string.byte(raw, 1) == 66 then  -- 'B': five doubles (see store)
      s.total, s.oldest, s.clean, s.ttl, s.cur = struct.unpack('<ddddd', raw, 2)
    else  -- text, as an earlier version wrote it
      local t, o, c, e, v = string.match(raw, '^(%-?%d+) (%d+) (%d+) ?(%-?%d*) ?(%-?%d*)$')
      s.total, s.oldest, s.clean, s.ttl = tonumber(t) or 0, tonumber(o) or now, tonumber(c) or -1, tonumber(e) or -1
      s.cur = tonumber(v) or 0
    end
  end
  if s.clean ~= now then
    -- A new second: recount the live buckets, plus the finished second's amount, which store()
    -- moves into the hash (load writes nothing: a script that stops later leaves no trace).
    local h = redis.call('HGETALL', key)
    local stale = {}
    local fsec, fval = s.clean, s.cur
    s.total, s.oldest, s.clean, s.cur = 0, now, now, 0
    for j = 1, #h, 2 do
      local sec = tonumber(h[j])
      if sec <= now - 60 then
        stale[#stale + 1] = h[j]
      else
        local v = tonumber(h[j + 1])
        s.total = s.total + v
        if v ~= 0 and sec < s.oldest then s.oldest = sec end
      end
    end
    if fval ~= 0 and fsec > now - 60 then
      s.flush_sec, s.flush_val = fsec, fval
      s.total = s.total + fval
      if fsec < s.oldest then s.oldest = fsec end
    end
    if #stale > 0 then s.stale = stale end
    s.dirty = true
  end
  return s
end
-- Minute counters' summaries written by store(), sent in one HSET by flush_summaries().
local pending_summaries = {}
-- The lifetime of minute m's hash (see the top): expires at the end of minute m + 3. Its creator,
-- in minute m, unlinks minute m - 3's (`current`: m is the current minute).
local function keep_summary_hash(minute, current)
  redis.call('EXPIREAT', summary_hash(minute), (minute + 4) * 60)
  if current then redis.call('UNLINK', summary_hash(minute - 3)) end
end
-- Writes the pending summaries, and the field/value pair `field`, `value` if given, to this
-- minute's hash. `fresh`: the hash may be new (summaries() said so).
local function flush_summaries(now, fresh, field, value)
  if field then
    pending_summaries[#pending_summaries + 1] = field
    pending_summaries[#pending_summaries + 1] = value
  end
  if #pending_summaries == 0 then return end
  local minute = math.floor(now / 60)
  redis.call('HSET', summary_hash(minute), unpack(pending_summaries))
  if fresh then keep_summary_hash(minute, true) end
  pending_summaries = {}
end
local function store(key, s, minute, now, ttl)
  if minute then
    if s.stale then redis.call('HDEL', key, unpack(s.stale)) end
    if s.flush_sec and s.flush_val ~= 0 then
      redis.call('HINCRBY', key, s.flush_sec, s.flush_val)
      s.touched = true
    end
    s.cur = s.cur + s.add
    -- The hash's TTL is renewed at most once a second, in every second it is written to.
    if s.touched and s.ttl ~= now then
      redis.call('EXPIRE', key, 61)
      s.ttl = now
    end
    -- Binary: unpacking five doubles costs the script far less than matching and converting text.
    local packed = struct.pack('<ddddd', s.total, s.oldest, s.clean, s.ttl, s.cur)
    pending_summaries[#pending_summaries + 1] = key
    pending_summaries[#pending_summaries + 1] = 'B' .. packed
  elseif ttl then
    redis.call('SET', key, s.n, 'EX', ttl)
  else
    redis.call('SET', key, s.n, 'KEEPTTL')
  end
end
-- Adds deltas[i] to counter keys[i] (minute[i]: a minute counter) for a reservation made in
-- second stamps[i]: a refund goes to that second while it is in the window; usage beyond a
-- reservation goes to the current second. Counters that expired meanwhile are left alone.
local function apply(keys, minute_of_i, stamps, deltas, now)
  local raw, _, fresh = summaries(keys, function(i) return minute_of_i[i] end, now)
  local state, order, minute_of = {}, {}, {}
  for i = 1, #keys do
    local key = keys[i]
    local minute = minute_of_i[i]
    local s = state[key]
    if s == nil then
      s = load(key, raw[i], minute, now)
      state[key] = s
      order[#order + 1] = key
      minute_of[key] = minute
    end
    if s.exists then
      local d = deltas[i]
      if minute then
        local stamp = stamps[i]
        if stamp == now then
          -- The current second, in the summary (never below zero).
          if s.cur + s.add + d < 0 then d = -(s.cur + s.add) end
          s.add = s.add + d
          s.total = s.total + d
          s.dirty = true
        elseif stamp == s.flush_sec then
          -- The second that just finished, on its way into the hash (never below zero).
          if s.flush_val + d < 0 then d = -s.flush_val end
          s.flush_val = s.flush_val + d
          s.total = s.total + d
          s.dirty = true
        elseif stamp > now - 60 then
          -- An earlier finished second, in the hash.
          local v = redis.call('HINCRBY', key, stamp, d)
          if v < 0 then
            redis.call('HSET', key, stamp, 0)
            d = d - v
          end
          s.total = s.total + d
          s.touched = true
          s.dirty = true
        elseif d > 0 then
          s.add = s.add + d
          s.total = s.total + d
          s.dirty = true
        end
      else
        s.n = math.max(0, s.n + d)
        s.dirty = true
      end
    end
  end
  for _, key in ipairs(order) do
    local s = state[key]
    if s.dirty then store(key, s, minute_of[key], now, nil) end
  end
  flush_summaries(now, fresh)
end
-- A reserve call's arguments (layout at kReserveBody): the counters, checked to add up (nil if
-- they do not). The admissions, packed in one string, are read only when needed (parse_tail).
local function parse_call()
  local d = tonumber(ARGV[2])
  if not d or #ARGV ~= 4 + 5 * d then return nil end
  local p = {d = d, minute = {}, limit = {}, ttl = {}, sum = {}, seed = {}}
  for c = 1, d do
    local b = 3 + (c - 1) * 5
    p.minute[c] = ARGV[b] == '0'
    p.limit[c] = tonumber(ARGV[b + 1])
    p.ttl[c] = ARGV[b + 2]
    p.sum[c] = tonumber(ARGV[b + 3])
    p.seed[c] = tonumber(ARGV[b + 4])
    if not p.limit[c] or not p.sum[c] or p.sum[c] < 0 or not p.seed[c] then return nil end
  end
  p.n = tonumber(ARGV[3 + 5 * d])
  if not p.n or p.n < 1 then return nil end
  return p
end
-- The packed admissions: the number of shapes, per shape its charges M, its amount slots K and
-- per charge (counter, slot), then per admission its shape and K amounts; space-separated.
-- Fills p.shape_c/shape_s/shape_k, p.adm (per admission: shape, index of its first amount in p.q)
-- and checks that the amounts add up to the counters' sums. False if malformed.
local function parse_tail(p)
  local q = {}
  for v in string.gmatch(ARGV[4 + 5 * p.d], '%S+') do q[#q + 1] = tonumber(v) end
  p.q, p.shape_c, p.shape_s, p.shape_k, p.adm = q, {}, {}, {}, {}
  local ns = q[1] or 0
  local ai = 2
  for sh = 1, ns do
    local m, k = q[ai] or 0, q[ai + 1] or 0
    ai = ai + 2
    local cs, ss = {}, {}
    for i = 1, m do
      cs[i], ss[i] = q[ai], q[ai + 1]
      if not cs[i] or cs[i] < 1 or cs[i] > p.d or not ss[i] or ss[i] < 1 or ss[i] > k then return false end
      ai = ai + 2
    end
    p.shape_c[sh], p.shape_s[sh], p.shape_k[sh] = cs, ss, k
  end
  local sum = {}
  for c = 1, p.d do sum[c] = 0 end
  for a = 1, p.n do
    local sh = q[ai]
    if not sh or not p.shape_k[sh] then return false end
    p.adm[2 * a - 1] = sh
    p.adm[2 * a] = ai + 1
    local cs, ss = p.shape_c[sh], p.shape_s[sh]
    for i = 1, #cs do
      local v = q[ai + ss[i]]
      if not v then return false end
      sum[cs[i]] = sum[cs[i]] + v
    end
    ai = ai + 1 + p.shape_k[sh]
  end
  if ai ~= #q + 1 then return false end
  for c = 1, p.d do
    if sum[c] ~= p.sum[c] then return false end
  end
  return true
end
