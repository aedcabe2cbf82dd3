-- touch: ARGV[3] id, ARGV[4] owner -> {the new deadline, now}, or nil
local T, tube = tube_keys(0, 1), ARGV[1]
local id = ARGV[3]
local j = get_job(tube, id)
if not held_by(j, ARGV[4]) then
  -- Composed without the generation check first (CHECK_FIRST): made here.
  if not same_generation() then return namespace_lost() end
  return nil
end
local now = now_us()
local deadline = now + ttr_ms(j) * 1000
detach(T, id, j)
attach(T, G, id, j, 'reserved', deadline, ARGV[4])
put_job(id, j)
-- The due index needs nothing: its entry is at or before the old, earlier deadline.
return { deadline, now }
