-- Return to ready the jobs in this tube reserved under any of the owner tokens in
-- ARGV[3] (joined by '\n'): each the token of one reserve attempt whose answer was lost
-- (Redis timed out, then ran it anyway). Nobody was told of those reservations, so they
-- are undone, and not counted (and the time each job became ready is kept: as far as
-- anyone knows it never left ready). One walk serves every lost attempt of the tube.
-- The reserved set is walked with ZSCAN, ARGV[5] members a call: ARGV[4] the cursor
-- ('0' to start). A job reserved under a token for the whole walk is found. ARGV[6] the
-- retention argument (see RET): the undone reserve leaves the job's history too.
-- -> {the number returned, the next cursor ('0' when the walk is done)}
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local owners = {}
for o in string.gmatch(ARGV[3], '[^\n]+') do owners[o] = true end
local scan = redis.call('ZSCAN', T.reserved, ARGV[4], 'COUNT', ARGV[5])
local members = scan[2]
RET = ret_of(ARGV[6])
local n = 0
-- ZSCAN answers member, score, member, score...
for i = 1, #members, 2 do
  local id = id_of(members[i])
  local j = get_job(tube, id)
  if j and owners[j[OWNER]] then
    detach(T, id, j)
    j[RESERVES] = math.max(j[RESERVES] - 1, 0)
    attach(T, G, id, j, 'ready')
    if RET then
      -- Its last event is the reserve nobody was told of.
      local k = ret_key('jh:' .. id)
      local h = redis.call('GET', k)
      local before = h and string.match(h, '^(.*) %d+r%d+$')
      if before then redis.call('SET', k, before) end
    end
    put_job(id, j)
    n = n + 1
  end
end
if n > 0 then
  wake(origin, tube)
end
return { n, scan[1] }
