-- The adjust script (counters.lua + this file).
-- Adjustments of many requests at once: ARGV[1] the call's id, then per key (window, stamp second,
-- delta); see apply(). Applied once per id (a marker lives two minutes): a call re-sent because
-- its answer was lost is harmless. Returns 1 if applied, 0 if it had been already.
if #ARGV ~= 1 + 3 * #KEYS then return redis.error_reply('infera adjust: arguments do not add up') end
-- A call re-sent after its answer was lost finds its id and does nothing.
if not redis.call('SET', 'infera:rl:adj:' .. tag_part .. ARGV[1], 1, 'NX', 'PX', 120000) then return 0 end
local now = tonumber(redis.call('TIME')[1])
local minute, stamps, deltas = {}, {}, {}
for i = 1, #KEYS do
  local b = 1 + (i - 1) * 3
  minute[i] = ARGV[b + 1] == '0'
  stamps[i] = tonumber(ARGV[b + 2])
  deltas[i] = tonumber(ARGV[b + 3])
end
apply(KEYS, minute, stamps, deltas, now)
return 1
