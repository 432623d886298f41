-- The reserve script (counters.lua + this file).
-- Several admissions in one call (a worker sends the admissions that queued while its previous
-- call was out together). KEYS: the distinct counters. ARGV[1] = the call's id; ARGV[2] = the
-- number of counters D, then per counter: window ('0' minute, '1' period), limit, ttl, the sum of
-- the amounts every admission of the call puts on it, and where a period counter starts if Redis
-- does not hold it (Charge::seed; '0' for minute counters). Then the number of admissions and, in one
-- string, the admissions (see parse_tail). Each admission is all or nothing; later ones see
-- earlier ones' reservations. When every counter has room for its sum, all are admitted without
-- reading them one by one (the common case: away from the limits a call costs the script O(D),
-- not O(admissions)); otherwise they are decided in order. Returns a flat list: now_ms, per
-- counter (use, oldest live second) before the call, then -1 if all were admitted, else per
-- admission 0 if admitted or the 1-based index of the charge that did not fit. The call leaves a
-- marker, field infera:rl:call:<id> of its minute's summary hash = "<second>:A" (all admitted) or
-- "<second>:<1 per admitted admission, else 0>", so a caller that timed out can undo it
-- (kCancelBody); a call cancelled before it ran finds its marker there and does nothing. (The
-- marker goes in with the summaries: the call costs Redis no command of its own.)
local p = parse_call()
if not p then return redis.error_reply('infera reserve: arguments do not add up') end
local t = redis.call('TIME')
local now = tonumber(t[1])
local now_ms = now * 1000 + math.floor(tonumber(t[2]) / 1000)
local d = p.d
local minute, limit = p.minute, p.limit
local call_field = 'infera:rl:call:' .. ARGV[1]
local raw, seen, fresh = summaries(KEYS, function(i) return minute[i] end, now, call_field)
if seen then return redis.error_reply('infera reserve: call cancelled') end
local state, total, out = {}, {}, {now_ms}
for c = 1, d do
  local s = load(KEYS[c], raw[c], minute[c], now)
  state[c] = s
  if not minute[c] and not s.exists and p.seed[c] > 0 then
    -- A day/month counter Redis does not hold (it lost its data): the store's figure.
    s.n = p.seed[c]
    s.dirty = true
  end
  if minute[c] then
    total[c] = s.total
    out[#out + 1] = s.total
    out[#out + 1] = s.oldest
  else
    total[c] = s.n
    out[#out + 1] = s.n
    out[#out + 1] = 0
  end
end
local fits = true
for c = 1, d do
  if total[c] + p.sum[c] > limit[c] then
    fits = false
    break
  end
end
local marker
if fits then
  for c = 1, d do total[c] = total[c] + p.sum[c] end
  out[#out + 1] = -1
  marker = 'A'
else
  if not parse_tail(p) then return redis.error_reply('infera reserve: arguments do not add up') end
  local amt, flags, q = {}, {}, p.q
  for a = 1, p.n do
    local sh, first = p.adm[2 * a - 1], p.adm[2 * a]
    local cs, ss = p.shape_c[sh], p.shape_s[sh]
    for j = 1, p.shape_k[sh] do amt[j] = q[first + j - 1] end
    local refused = 0
    for i = 1, #cs do
      local c = cs[i]
      if total[c] + amt[ss[i]] > limit[c] then
        refused = i
        break
      end
    end
    if refused == 0 then
      for i = 1, #cs do
        local c = cs[i]
        total[c] = total[c] + amt[ss[i]]
      end
    end
    out[#out + 1] = refused
    flags[a] = refused == 0 and '1' or '0'
  end
  marker = table.concat(flags)
end
for c = 1, d do
  local s = state[c]
  if minute[c] then
    if total[c] ~= s.total then
      if s.total == 0 then s.oldest = now end
      s.add = total[c] - s.total
      s.total = total[c]
      s.dirty = true
    end
  elseif total[c] ~= s.n then
    s.n = total[c]
    s.dirty = true
  end
  if s.dirty then store(KEYS[c], s, minute[c], now, p.ttl[c]) end
end
flush_summaries(now, fresh, call_field, now .. ':' .. marker)
return out
