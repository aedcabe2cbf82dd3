-- windows: the timer's sweep of the dedupe windows (docs/EXTENSIONS.md, Keys). Ends at
-- most ARGV[2] windows past their end (uncounted), then at most as many over ARGV[1],
-- the most open at once (counted as evicted), so windows go when they end even while
-- no delete opens another (a delete sweeps too: `end_key`).
-- -> how many past their end went (ARGV[2] of them: more may be waiting)
return end_windows(G, tonumber(ARGV[1]), now_us(), tonumber(ARGV[2]))
