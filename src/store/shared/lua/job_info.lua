-- stats-job: ARGV[1] the id, the job found by it alone (`find_job`: no tube's keys, one
-- round trip) -> nil, or {its tube, {the meta array (state as a string; delay and TTR
-- in ms), then now}}
local tube, j = find_job(ARGV[1])
if not tube then return nil end
return { tube, { j[PRI], delay_ms(j), ttr_ms(j), j[CREATED], j[STATE], j[DUE], j[RESERVES],
  j[TIMEOUTS], j[RELEASES], j[BURIES], j[KICKS], now_us() } }
