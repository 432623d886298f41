-- Newest event wins, per key. KEYS: row keys; ARGV: per key, the row (8-byte big-endian event
-- time first) and its expiry (unix ms, 0 = none). Returns how many rows were written.
local written = 0
for i = 1, #KEYS do
  local row = ARGV[2 * i - 1]
  local expire_ms = tonumber(ARGV[2 * i])
  local cur = redis.call('GET', KEYS[i])
  local newer = true
  if cur and #cur >= 8 then
    newer = struct.unpack('>i8', row) >= struct.unpack('>i8', cur)
  end
  if newer then
    if expire_ms > 0 then
      redis.call('SET', KEYS[i], row, 'PXAT', expire_ms)
    else
      redis.call('SET', KEYS[i], row)
    end
    written = written + 1
  end
end
return written
