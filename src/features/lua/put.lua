-- Unconditional writes. KEYS: row keys; ARGV: per key, the row and its expiry (unix ms, 0 = none).
for i = 1, #KEYS do
  local expire_ms = tonumber(ARGV[2 * i])
  if expire_ms > 0 then
    redis.call('SET', KEYS[i], ARGV[2 * i - 1], 'PXAT', expire_ms)
  else
    redis.call('SET', KEYS[i], ARGV[2 * i - 1])
  end
end
return #KEYS
