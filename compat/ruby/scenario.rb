# A producer/worker session with beaneater as Debian ships it (ruby-beaneater,
# beaneater 1.1.x), used the way its README shows: tubes[...].put, tubes.reserve,
# job.bury/release/touch/delete, jobs.register + jobs.process!.
#
# Run against any beanstalk server: BEANSTALK_ADDR=host:port ruby scenario.rb
# Exits non-zero on the first behaviour that differs from beanstalkd's.

require 'beaneater'
require 'securerandom'

class ScenarioFailure < StandardError; end
class TransientError < StandardError; end

def show(v)
  s = v.inspect
  s.size > 120 ? "#{s[0, 100]}... (#{v.respond_to?(:bytesize) ? v.bytesize : '?'} bytes)" : s
end

def eq(got, want, what)
  raise ScenarioFailure, "#{what}: expected #{show(want)}, got #{show(got)}" unless got == want
end

def check(ok, what)
  raise ScenarioFailure, what unless ok
end

# A loaded machine delays replies (and this process) by seconds: only a wrong answer
# may fail the scenario. Something early is wrong; late is only slow, by up to this much.
LATE = 5.0
# A reserve that must find a job already there waits this long at most (it is answered
# at once; the bound only ends a wrong answer).
READY = 10

def between(secs, lo, hi, what)
  return if secs >= lo && secs <= hi + LATE

  raise ScenarioFailure, format('%s: took %.3f s, expected %.2f..%.2f s (+%.0f s on a loaded machine)', what, secs, lo, hi, LATE)
end

def now
  Process.clock_gettime(Process::CLOCK_MONOTONIC)
end

# Runs the block and returns the error of class klass it raises; fails otherwise.
def expect_error(klass, what)
  result = yield
rescue ScenarioFailure
  raise
rescue StandardError => e
  return e if e.is_a?(klass)

  raise ScenarioFailure, "#{what}: expected #{klass}, got #{e.class}: #{e.message}"
else
  raise ScenarioFailure, "#{what}: expected #{klass}, got #{show(result)}"
end

def expect_job(job, id, body, what)
  check(!job.nil?, "#{what}: expected job #{id}, got nothing")
  eq(job.id.to_s, id.to_s, "#{what}: job id")
  eq(job.body.b, body.b, "#{what}: job body")
  job
end

# stats-job of a job, as beaneater parses it (a StatStruct of YAML-typed values).
def job_stats(client, id)
  client.jobs.find(id)&.stats || raise(ScenarioFailure, "job #{id} not found")
end

def main
  addr = ENV.fetch('BEANSTALK_ADDR', '127.0.0.1:11300')
  addr2 = ENV.fetch('BEANSTALK_ADDR2', '')
  server = ENV.fetch('BEANSTALK_SERVER', 'beanstalkd')
  server_pid = ENV.fetch('BEANSTALK_PID', '0').to_i
  name = "rb-mail-#{Process.pid}-#{SecureRandom.hex(3)}"
  name2 = "#{name}-audit"

  producer = Beaneater.new(addr)
  worker = Beaneater.new(addr)
  other = Beaneater.new(addr)
  tube = producer.tubes[name]

  # use / watch / ignore, and what the server says about them
  eq(producer.tubes.used.name, 'default', 'list-tube-used on a new connection')
  eq(worker.tubes.watched.map(&:name), ['default'], 'list-tubes-watched on a new connection')
  worker.tubes.watch(name)
  worker.tubes.ignore('default')
  eq(worker.tubes.watched.map(&:name), [name], 'list-tubes-watched after watch + ignore')
  other.tubes.watch!(name)
  eq(other.tubes.watched.map(&:name), [name], 'list-tubes-watched after watch!')
  expect_error(Beaneater::NotIgnoredError, 'ignore of the last watched tube') { worker.tubes.ignore(name) }
  eq(worker.tubes.watched.map(&:name), [name], 'list-tubes-watched after NOT_IGNORED')

  # put with priority, delay and TTR; the most urgent job comes first
  low = tube.put('mail-low', pri: 100, delay: 0, ttr: 30)
  eq(low[:status], 'INSERTED', 'put reply')
  eq(producer.tubes.used.name, name, 'list-tube-used after put on a tube')
  check(producer.tubes.all.map(&:name).include?(name), 'list-tubes lacks the new tube')
  high = tube.put('mail-high', pri: 5, delay: 0, ttr: 30)
  check(high[:id].to_i > low[:id].to_i, 'job ids increase')
  ts = tube.stats
  eq(ts.name, name, 'stats-tube name')
  eq([ts.current_jobs_ready, ts.current_jobs_urgent, ts.total_jobs], [2, 2, 2], 'stats-tube ready/urgent/total')
  eq([ts.current_using, ts.current_watching], [1, 2], 'stats-tube using/watching')

  job = expect_job(worker.tubes.reserve(READY), high[:id], 'mail-high', 'reserve-with-timeout 1')
  st = job.stats
  eq([st.state, st.tube, st.pri, st.ttr, st.reserves], ['reserved', name, 5, 30, 1], 'stats-job of a reserved job')
  check((25..29).cover?(st.time_left), "stats-job time-left of a reserved job: #{st.time_left}")
  eq(job.tube, name, 'job.tube')
  check(job.reserved?, 'job.reserved?')
  eq(tube.stats.current_jobs_reserved, 1, 'stats-tube current-jobs-reserved')

  # touch restarts the TTR; nobody else can touch the job
  sleep 1
  before = job.stats.time_left
  check((20..28).include?(before), "time-left one second after reserve: #{before}")
  job.touch
  after = job.stats.time_left
  check(after > before || after == 29, "time-left after touch: #{after} (#{before} before)")
  expect_error(Beaneater::NotFoundError, 'touch by another connection') { other.jobs.find(job.id).touch }

  # delete: the job is gone
  job.delete
  eq(producer.jobs.find(high[:id]), nil, 'peek of a deleted job')
  expect_error(Beaneater::NotFoundError, 'stats-job of a deleted job') { job.stats }
  expect_error(Beaneater::NotFoundError, 'second delete') { job.delete }

  # bury with a new priority, peek-buried, kick
  job = expect_job(worker.tubes.reserve(READY), low[:id], 'mail-low', 'reserve of the second job')
  job.bury(pri: 7)
  expect_job(tube.peek(:buried), low[:id], 'mail-low', 'peek-buried')
  st = job.stats
  eq([st.state, st.pri, st.buries], ['buried', 7, 1], 'stats-job after bury')
  eq(tube.stats.current_jobs_buried, 1, 'stats-tube current-jobs-buried')
  eq(tube.peek(:ready), nil, 'peek-ready with only a buried job')
  expect_error(Beaneater::TimedOutError, 'reserve-with-timeout 0 with only a buried job') { worker.tubes.reserve(0) }
  eq(tube.kick(10), { status: 'KICKED', id: '1' }, 'kick 10 with one buried job')
  expect_job(tube.peek(:ready), low[:id], 'mail-low', 'peek-ready after kick')
  st = job.stats
  eq([st.state, st.kicks, st.pri], ['ready', 1, 7], 'stats-job after kick')

  # kick-job
  job = expect_job(worker.tubes.reserve(READY), low[:id], 'mail-low', 'reserve after kick')
  job.bury(pri: 8)
  eq(producer.jobs.find(low[:id]).kick, { status: 'KICKED' }, 'kick-job of a buried job')
  st = job.stats
  eq([st.state, st.kicks, st.buries, st.reserves, st.pri], ['ready', 2, 2, 2, 8], 'stats-job after kick-job')
  expect_error(Beaneater::NotFoundError, 'kick-job of a ready job') { producer.jobs.find(low[:id]).kick }

  # release with a delay: delayed, then reservable after about a second
  job = expect_job(worker.tubes.reserve(READY), low[:id], 'mail-low', 'reserve after kick-job')
  job.release(pri: 50, delay: 1)
  released = now
  expect_job(tube.peek(:delayed), low[:id], 'mail-low', 'peek-delayed after release with delay')
  st = job.stats
  eq([st.state, st.pri, st.delay, st.releases], ['delayed', 50, 1, 1], 'stats-job after release with delay')
  eq(tube.stats.current_jobs_delayed, 1, 'stats-tube current-jobs-delayed')
  expect_error(Beaneater::TimedOutError, 'reserve-with-timeout 0 with only a delayed job') { worker.tubes.reserve(0) }
  job = expect_job(worker.tubes.reserve(READY), low[:id], 'mail-low', 'reserve of a released job')
  between(now - released, 0.9, 1.5, 'release with delay 1, then reserve')
  job.release(pri: 50, delay: 0)
  expect_job(tube.peek(:ready), low[:id], 'mail-low', 'peek-ready after release')
  producer.jobs.find(low[:id]).delete # a ready job can be deleted by anyone
  eq(tube.peek(:ready), nil, 'peek-ready on an empty tube')

  # put with a delay
  later = tube.put('mail-later', pri: 10, delay: 1, ttr: 30)
  put_at = now
  expect_job(tube.peek(:delayed), later[:id], 'mail-later', 'peek-delayed after put with delay')
  eq(job_stats(producer, later[:id]).state, 'delayed', 'stats-job state of a delayed put')
  job = expect_job(worker.tubes.reserve(READY), later[:id], 'mail-later', 'reserve of a delayed put')
  between(now - put_at, 0.9, 1.5, 'put with delay 1, then reserve')
  job.delete

  # kick moves a delayed job when nothing is buried
  parked = tube.put('mail-parked', pri: 10, delay: 60, ttr: 30)
  eq(tube.peek(:buried), nil, 'peek-buried with nothing buried')
  eq(tube.kick(1), { status: 'KICKED', id: '1' }, 'kick 1 with one delayed job')
  eq(job_stats(producer, parked[:id]).state, 'ready', 'stats-job of a kicked delayed job')
  producer.jobs.find(parked[:id]).delete

  # TTR: DEADLINE_SOON a second before the deadline, then the job goes back to ready
  short = tube.put('mail-short', pri: 10, delay: 0, ttr: 2)
  job = expect_job(worker.tubes.reserve(READY), short[:id], 'mail-short', 'reserve of a TTR-2 job')
  reserved = now
  expect_error(Beaneater::DeadlineSoonError, 'reserve while a TTR-2 job nears its deadline') { worker.tubes.reserve(5) }
  between(now - reserved, 0.9, 1.5, 'DEADLINE_SOON on a TTR-2 job')
  eq(job.stats.state, 'reserved', 'DEADLINE_SOON does not release the job')
  # Another worker waits for the job meanwhile. beanstalkd 1.12 can miss the TTR tick of an idle connection
  # until that connection sends a command (conn_timeout drops it from the timer heap when its tick and the
  # deadline fall in the same microsecond): the worker sends one after the deadline, as in the protocol cases.
  waiter = Thread.new { [other.tubes.reserve(READY), now] }
  sleep [reserved + 2.2 - now, 0].max
  eq(worker.tubes.watched.map(&:name), [name], 'list-tubes-watched of the worker after its TTR')
  taken, taken_at = waiter.value
  expect_job(taken, short[:id], 'mail-short', 'reserve of a timed-out job by another worker')
  between(taken_at - reserved, 1.9, 2.5, 'TTR 2 expiry')
  st = taken.stats
  eq([st.state, st.timeouts, st.reserves], ['reserved', 1, 2], 'stats-job after a TTR timeout')
  expect_error(Beaneater::NotFoundError, 'delete by the worker whose reservation timed out') { job.delete }
  taken.delete

  # pause-tube, resume with 0; a short pause delays reserve
  paused = tube.put('mail-paused', pri: 10, delay: 0, ttr: 30)
  eq(tube.pause(60), { status: 'PAUSED' }, 'pause-tube reply')
  ts = tube.stats
  eq([ts.pause, ts.cmd_pause_tube], [60, 1], 'stats-tube pause / cmd-pause-tube')
  check((55..60).cover?(ts.pause_time_left), "stats-tube pause-time-left: #{ts.pause_time_left}")
  expect_error(Beaneater::TimedOutError, 'reserve-with-timeout 0 on a paused tube') { worker.tubes.reserve(0) }
  tube.pause(0)
  eq(tube.stats.pause, 0, 'stats-tube pause after resume')
  start = now
  job = expect_job(worker.tubes.reserve(0), paused[:id], 'mail-paused', 'reserve-with-timeout 0 after resume')
  between(now - start, 0.0, 0.3, 'reserve after resume')
  job.release(pri: 10, delay: 0)
  tube.pause(1)
  start = now
  job = expect_job(worker.tubes.reserve(READY), paused[:id], 'mail-paused', 'reserve on a tube paused for 1 s')
  between(now - start, 0.9, 1.5, 'pause-tube 1, then reserve')
  job.delete
  expect_error(Beaneater::NotFoundError, 'pause-tube of a missing tube') { producer.tubes["#{name}-nobody"].pause(1) }
  expect_error(Beaneater::NotFoundError, 'stats-tube of a missing tube') { producer.tubes["#{name}-nobody"].stats }

  # binary bodies come back byte for byte (CR, LF, CRLF, NUL and every other byte)
  binary = "\x00head\r\nmiddle\rlone-cr\nlone-lf\r\n\r\n\x00\xff".b + (0..255).map(&:chr).join.b + "\r\n".b
  bin = tube.put(binary, pri: 10, ttr: 30)
  expect_job(producer.jobs.find(bin[:id]), bin[:id], binary, 'peek of a binary job')
  expect_job(worker.tubes.reserve(READY), bin[:id], binary, 'reserve of a binary job').delete
  crlf = tube.put("\r\n", pri: 10, ttr: 30)
  expect_job(worker.tubes.reserve(READY), crlf[:id], "\r\n", 'reserve of a CRLF-only job').delete
  empty = tube.put('', pri: 10, ttr: 30)
  expect_job(worker.tubes.reserve(READY), empty[:id], '', 'reserve of an empty job').delete

  # the largest job the server takes, and one byte more
  max_body = ("\x00\r\nab".b * (65_535 / 5))
  eq(max_body.bytesize, 65_535, 'test body length')
  big = tube.put(max_body, pri: 10, ttr: 30)
  expect_job(worker.tubes.reserve(READY), big[:id], max_body, 'reserve of a 65535-byte job').delete
  expect_error(Beaneater::JobTooBigError, 'put of a 65536-byte job') { tube.put(max_body + 'x', pri: 10, ttr: 30) }
  after = tube.put('after-too-big', pri: 10, ttr: 30) # the connection stays usable
  eq(after[:id].to_i, big[:id].to_i + 1, 'JOB_TOO_BIG consumes no job id')
  expect_job(worker.tubes.reserve(READY), after[:id], 'after-too-big', 'reserve after JOB_TOO_BIG').delete

  # several watched tubes
  audit_tube = producer.tubes[name2]
  worker.tubes.watch(name2)
  eq(worker.tubes.watched.map(&:name), [name, name2], 'list-tubes-watched with two tubes')
  audit = audit_tube.put('audit-1', pri: 10, ttr: 30)
  eq(producer.tubes.used.name, name2, 'list-tube-used after the second use')
  job = expect_job(worker.tubes.reserve(READY), audit[:id], 'audit-1', 'reserve from the second watched tube')
  eq(job.tube, name2, 'stats-job tube of a job in the second tube')
  job.delete
  worker.tubes.ignore(name2)
  eq(worker.tubes.watched.map(&:name), [name], 'list-tubes-watched after ignoring the second tube')
  audit2 = audit_tube.put('audit-2', pri: 10, ttr: 30)
  expect_error(Beaneater::TimedOutError, 'reserve ignores an ignored tube') { worker.tubes.reserve(0) }
  expect_job(audit_tube.peek(:ready), audit2[:id], 'audit-2', 'peek-ready in the used tube').delete

  # a worker loop: jobs.register + jobs.process! (plain reserve, retry with release, bury on error)
  attempts = Hash.new { |h, k| h[k] = [] }
  handled = []
  tube.put('welcome-1', pri: 1, ttr: 30)
  poison = tube.put('poison', pri: 2, ttr: 30)
  tube.put('flaky', pri: 3, ttr: 30)
  worker.jobs.register(name, retry_on: [TransientError], max_retries: 2) do |j|
    attempts[j.body] << now
    raise ArgumentError, 'cannot render' if j.body == 'poison'
    raise TransientError, 'smtp busy' if j.body == 'flaky' && attempts['flaky'].size == 1

    handled << j.body
    worker.jobs.stop! if handled.size == 2
  end
  worker.jobs.process!(release_delay: 1)
  eq(handled, %w[welcome-1 flaky], 'jobs handled by process!')
  eq(attempts.transform_values(&:size), { 'welcome-1' => 1, 'poison' => 1, 'flaky' => 2 }, 'attempts in process!')
  between(attempts['flaky'][1] - attempts['flaky'][0], 0.9, 1.5, 'process! retry after release with delay 1')
  expect_job(tube.peek(:buried), poison[:id], 'poison', 'process! buries a failing job')
  st = job_stats(producer, poison[:id])
  eq([st.state, st.pri, st.buries], ['buried', 2, 1], 'stats-job of the job process! buried')
  eq(tube.peek(:ready), nil, 'process! deleted the handled jobs')
  producer.jobs.find(poison[:id]).delete
  eq(worker.tubes.watched.map(&:name), [name], 'process! watches only the registered tube')

  # server-wide stats
  stats = producer.stats
  %w[current_jobs_urgent current_jobs_ready current_jobs_reserved current_jobs_delayed current_jobs_buried
     cmd_put cmd_reserve cmd_reserve_with_timeout job_timeouts total_jobs max_job_size current_tubes
     current_connections current_producers current_workers current_waiting total_connections pid uptime
     binlog_max_size].each do |key|
    check(stats[key].is_a?(Integer), "stats #{key} is not an integer: #{show(stats[key])}")
  end
  check(stats.keys.include?('version') && stats.keys.include?('hostname'), "stats keys: #{stats.keys}")
  check(stats.rusage_utime.is_a?(Numeric), "stats rusage-utime: #{show(stats.rusage_utime)}")
  eq(stats.max_job_size, 65_535, 'stats max-job-size')
  eq(stats.current_jobs_ready, 0, 'stats current-jobs-ready')
  eq(stats.current_jobs_buried, 0, 'stats current-jobs-buried')
  eq(stats.current_connections, 3, 'stats current-connections')
  eq(stats.job_timeouts, 1, 'stats job-timeouts')
  eq(stats.cmd_reserve, 4, 'stats cmd-reserve (the four reserves of process!)')
  eq(stats.total_jobs, audit2[:id].to_i + 3, 'stats total-jobs')
  eq(stats.draining, false, 'stats draining')
  eq(stats.pid, server_pid, 'stats pid') if server_pid.positive?

  # a tube nobody uses, watches or fills disappears
  producer.tubes.use('default')
  worker.tubes.watch!('default')
  other.tubes.watch!('default')
  names = producer.tubes.all.map(&:name)
  check(!names.include?(name) && !names.include?(name2), "unused tubes still listed: #{names}")
  expect_error(Beaneater::NotFoundError, 'stats-tube of a vanished tube') { tube.stats }

  # a second server: an independent one for beanstalkd and memory, the same queue for redis
  unless addr2.empty?
    shared = "#{name}-shared"
    there = Beaneater.new(addr2)
    there.tubes.watch!(shared)
    mine = producer.tubes[shared].put('hand-over', pri: 10, ttr: 30)
    if %w[redis leader].include?(server)
      job = expect_job(there.tubes.reserve(READY), mine[:id], 'hand-over', 'reserve on the second redstalk of the same Redis')
      eq(job_stats(producer, mine[:id]).state, 'reserved', 'stats-job on the first server of a job reserved on the second')
      job.delete
      eq(producer.jobs.find(mine[:id]), nil, 'peek on the first server of a job deleted on the second')
    else
      expect_error(Beaneater::TimedOutError, 'reserve on an independent second server') { there.tubes.reserve(0) }
      producer.jobs.find(mine[:id]).delete
    end
    there.close
  end

  # drain mode (SIGUSR1): no new jobs; beaneater retries DRAINING twice, a second apart, then gives up
  if server_pid.positive?
    Process.kill('USR1', server_pid)
    deadline = now + LATE
    sleep 0.05 until producer.stats.draining || now > deadline
    eq(producer.stats.draining, true, 'stats draining after SIGUSR1')
    expect_error(Beaneater::DrainingError, 'put in drain mode') { producer.tubes['default'].put('too-late') }
  end

  [producer, worker, other].each(&:close)
  puts 'beaneater scenario: ok'
end

begin
  main
rescue StandardError => e
  warn "beaneater scenario FAILED: #{e.class}: #{e.message}"
  # The library's frames first, then the scenario's own lines: which step it was.
  warn (e.backtrace.first(3) + e.backtrace.grep(/scenario\.rb/).first(3)).uniq.join("\n")
  exit 1
end
