-- reserve-batch across watched tubes: KEYS as `reserve`'s; ARGV[1] origin (unused),
-- ARGV[2] owner (one token for the whole batch: a batch whose reply is lost is undone
-- whole), ARGV[3] the most jobs, ARGV[4] the retention argument (see RET), ARGV[5..]
-- the tube names.
-- -> {reservations (each as `reserve_one` gives it, in the order successive reserves
-- would take them), DAMAGED message or ''}: a damaged job is dropped and ends the batch.
local owner, now, max = ARGV[2], now_us(), tonumber(ARGV[3])
RET = ret_of(ARGV[4], now)
local out = {}
while #out < max do
  local r, damaged = reserve_one(owner, now, ARGV, 4, N_NS_KEYS + 1)
  if damaged then return { out, damaged } end
  if not r then break end
  out[#out + 1] = r
end
return { out, '' }
