-- bury: ARGV[3] id, ARGV[4] owner, ARGV[5] pri, ARGV[6] the retention argument (see
-- RET) -> 1 or 0
local T, tube = tube_keys(0, 1), ARGV[1]
local id = ARGV[3]
local j = get_job(tube, id)
if not held_by(j, ARGV[4]) then
  -- Composed without the generation check first (CHECK_FIRST): made here.
  if not same_generation() then return namespace_lost() end
  return 0
end
detach(T, id, j)
j[PRI], j[BURIES] = tonumber(ARGV[5]), j[BURIES] + 1
attach(T, G, id, j, 'buried')
put_job(id, j)
RET = ret_of(ARGV[6])
if RET then note(id, 'b', RET.conn) end
return 1
