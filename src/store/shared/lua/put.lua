-- put: ARGV[3] pri, ARGV[4] delay (ms), ARGV[5] ttr (ms), ARGV[6] body, ARGV[7] the
-- retention argument (see RET) -> the id.
-- ARGV[8], when given: an id the caller took, under which it wrote the body already (a
-- large body stays out of Lua, see large.rs; G.ahead names it until now); ARGV[6] is
-- then empty.
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local pri, delay, ttr = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_us()
RET = ret_of(ARGV[7], now)
local id, body = ARGV[8], nil
if id then
  if not has_body(id) then
    return redis.error_reply('BODY_MISSING the body written ahead of this put is gone')
  end
  redis.call('ZREM', G.ahead, id)
else
  id, body = new_id(G), ARGV[6]
end
put_new(T, G, tube, origin, id, body, pri, delay, ttr, now)
return id
