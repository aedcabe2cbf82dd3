-- the operator API's job entry: ARGV[3] id -> nil or the entry (see `admin_entry`)
local id = ARGV[3]
local j = get_job(ARGV[1], id)
if not j then return nil end
return admin_entry(id, j, now_us())
