-- The cancel script (counters.lua + this file).
-- Undoes a reserve call whose answer never came back (a timeout after the call ran): same KEYS and
-- ARGV as the call. If the call ran, its admitted amounts are refunded (once); if it has not run,
-- it is marked cancelled so that it never will. Returns 1 if something was refunded, else 0. The
-- call's marker is in the summary hash of this minute or one of the two before (a cancel is retried
-- for up to 100 s after its call); "cancelled" goes into this minute's and the next two, where the
-- call would look if it ran within two minutes; "refunded" into this minute's.
local call_field = 'infera:rl:call:' .. ARGV[1]
local now = tonumber(redis.call('TIME')[1])
local minute = math.floor(now / 60)
local v = redis.call('HGET', summary_hash(minute), call_field)
  or redis.call('HGET', summary_hash(minute - 1), call_field)
  or redis.call('HGET', summary_hash(minute - 2), call_field)
local function mark(m, value)
  redis.call('HSET', summary_hash(m), call_field, value)
  keep_summary_hash(m, m == minute)
end
if not v then
  for m = minute, minute + 2 do mark(m, 'cancelled') end
  return 0
end
if v == 'cancelled' or v == 'refunded' then return 0 end
local p = parse_call()
if not p then return redis.error_reply('infera cancel: arguments do not add up') end
local sep = string.find(v, ':', 1, true)
local stamp = tonumber(string.sub(v, 1, sep - 1))
local flags = string.sub(v, sep + 1)
local refund = {}
if flags == 'A' then
  for c = 1, p.d do refund[c] = -p.sum[c] end
else
  if not parse_tail(p) then return redis.error_reply('infera cancel: arguments do not add up') end
  for c = 1, p.d do refund[c] = 0 end
  for a = 1, p.n do
    if string.sub(flags, a, a) == '1' then
      local sh, first = p.adm[2 * a - 1], p.adm[2 * a]
      local cs, ss = p.shape_c[sh], p.shape_s[sh]
      for i = 1, #cs do refund[cs[i]] = refund[cs[i]] - p.q[first + ss[i] - 1] end
    end
  end
end
local keys, minute_of, stamps, deltas = {}, {}, {}, {}
for c = 1, p.d do
  if refund[c] ~= 0 then
    keys[#keys + 1] = KEYS[c]
    minute_of[#minute_of + 1] = p.minute[c]
    stamps[#stamps + 1] = stamp
    deltas[#deltas + 1] = refund[c]
  end
end
if #keys > 0 then apply(keys, minute_of, stamps, deltas, now) end
mark(minute, 'refunded')
return 1
