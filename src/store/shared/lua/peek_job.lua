-- peek <id>: ARGV[1] the id, the job found by it alone (`find_job`: no tube's keys)
-- -> nil or {id, body (its length when large: see body_for_reply)}
local id = ARGV[1]
if not find_job(id) then return nil end
local body = body_for_reply(id)
if not body then return nil end
return { id, body }
