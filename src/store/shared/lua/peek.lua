-- peek-ready, peek-delayed, peek-buried: ARGV[3] which ('ready', 'delayed', 'buried')
-- -> nil or {id, body (its length when large: see body_for_reply)}. A peek by id is
-- peek_job's.
local T = tube_keys(0, 1)
local m = redis.call('ZRANGE', T[ARGV[3]], 0, 0)[1]
if not m then return nil end
local id = id_of(m)
local body = body_for_reply(id)
if not body then return nil end
return { id, body }
