-- reserve across watched tubes: the reserve group of each watched tube (the keys a
-- reserve may touch), in ARGV order; ARGV[1] origin (unused), ARGV[2] owner, ARGV[3]
-- the retention argument (see RET), ARGV[4..] the tube names. -> nil, or the
-- reservation of `reserve_one` (a damaged job: a DAMAGED error, the job dropped).
local now = now_us()
RET = ret_of(ARGV[3], now)
local r, damaged = reserve_one(ARGV[2], now, 3)
if damaged then return redis.error_reply(damaged) end
return r
