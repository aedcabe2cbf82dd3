-- delete: the tube's group; ARGV as `delete_op` (prelude) takes it -> 1 deleted, 0 not
-- found (or held by another). Composed without the generation check first
-- (CHECK_FIRST; see `delete_op`).
return delete_op(N_NS_KEYS + 1, ARGV)
