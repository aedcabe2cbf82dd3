-- the operator API's job entry: ARGV[1] the id, the job found by it alone (`find_job`)
-- -> nil, or {its tube, the entry (see `admin_entry`)}
local id = ARGV[1]
local tube, j = find_job(id)
if not tube then return nil end
return { tube, admin_entry(id, j, now_us()) }
