-- stats-job figures: ARGV[3] id -> nil or the meta array (state as a string; delay and
-- TTR in ms), then now
local j = get_job(ARGV[1], ARGV[3])
if not j then return nil end
return { j[PRI], delay_ms(j), ttr_ms(j), j[CREATED], j[STATE], j[DUE], j[RESERVES], j[TIMEOUTS],
         j[RELEASES], j[BURIES], j[KICKS], now_us() }
