# beaneater (Debian's ruby-beaneater): no hook for TLS or a first command, so it
# connects to a plain loopback listener beside the TLS ones, whose every connection
# has the role that listener names (`--listen 127.0.0.1:PORT,role=mailer`).
require 'beaneater'

def fail(what)
  warn "beaneater on a role listener: #{what}"
  exit 1
end

beanstalk = Beaneater.new(ENV.fetch('ROLE_ADDR'))
# The role may not put to `default` (the tube a new connection uses): beaneater hands
# the reply over as the put's status.
refused = beanstalk.tubes['default'].put('no')
fail("a put to default: #{refused.inspect}") unless refused[:status] == 'FORBIDDEN'
tube = beanstalk.tubes['emails']
put = tube.put('eight', ttr: 60)
fail("a put to emails: #{put.inspect}") unless put[:status] == 'INSERTED'
beanstalk.tubes.watch!('emails')
job = beanstalk.tubes.reserve(5)
fail("reserved #{job.body.inspect}") unless job.body == 'eight'
job.delete
beanstalk.close
puts 'beaneater on a role listener: ok'
