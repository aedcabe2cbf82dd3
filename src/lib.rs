//! redstalk: a beanstalkd-compatible job queue server.
