-- the operator API's job entry: ARGV[3] id -> nil or the entry (see `admin_entry`)
local T = tube_keys(0, 1)
local id = ARGV[3]
local j = get_job(T, id)
if not j then return nil end
return admin_entry(T, id, j, now_us())
