-- peek: ARGV[3] the id (for 'id'), ARGV[4] which ('id', 'ready', 'delayed', 'buried')
-- -> nil or {id, body (its length when large: see body_for_reply)}
local T = tube_keys(0, 1)
local which, m = ARGV[4], nil
if which == 'id' then
  m = ARGV[3]
else
  m = redis.call('ZRANGE', T[which], 0, 0)[1]
end
if not m then return nil end
local id = m
if which ~= 'id' then id = id_of(m) end
local body = body_for_reply(id)
if not body then return nil end
return { id, body }
