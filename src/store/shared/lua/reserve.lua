-- reserve across watched tubes: the reserve group of each watched tube (the keys a
-- reserve may touch), in the order of their names; ARGV as `reserve_op` (prelude)
-- takes it -> nil, or a reservation (a damaged job: a DAMAGED error, the job dropped).
return reserve_op(N_NS_KEYS + 1, ARGV)
