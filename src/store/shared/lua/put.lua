-- put: the tube's group; ARGV as `put_op` (prelude) takes it -> the id.
return put_op(N_NS_KEYS + 1, ARGV)
