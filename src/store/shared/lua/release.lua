-- release: ARGV[3] id, ARGV[4] owner, ARGV[5] pri, ARGV[6] delay (ms), ARGV[7] the
-- tube's policy ('' none: see `rule_of`), ARGV[8] where in its backoff's jitter the
-- release lands (`backoff_delay`), ARGV[9] the retention argument (see RET) -> 1 or 0
-- (1 also when a dead letter rule buried it)
local T, tube, origin = tube_keys(0, 1), ARGV[1], ARGV[2]
local id = ARGV[3]
local j = get_job(tube, id)
if not held_by(j, ARGV[4]) then
  -- Composed without the generation check first (CHECK_FIRST): made here.
  if not same_generation() then return namespace_lost() end
  return 0
end
local now = now_us()
RET = ret_of(ARGV[9], now)
release_job(T, G, tube, origin, id, j, tonumber(ARGV[5]), tonumber(ARGV[6]), rule_of(ARGV[7]),
  tonumber(ARGV[8]), now)
return 1
