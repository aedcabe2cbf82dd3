-- delete_job: a delete by a connection that does not hold the job; ARGV as
-- `delete_job_op` (prelude) takes it -> 1 deleted, 0 not found or reserved.
return delete_job_op(ARGV)
