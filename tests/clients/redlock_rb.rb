# A driver that reproduces the wire behaviour of redlock-rb (the `redlock` gem, 2.x; not packaged
# in Debian, and RubyGems is not reachable from here) on Debian's ruby-redis: our own code sending
# what the gem sends, in its order. Its LOCK_SCRIPT, UNLOCK_SCRIPT and PTTL_SCRIPT are read from
# tests/clients/lua/redlockrb_*.lua, which hold them byte for byte (heredoc indentation included,
# so the SHA1s are the gem's).
#   lock:    value = SecureRandom.uuid; up to retry_count+1 tries, sleeping
#            (retry_delay + rand(retry_jitter)) ms between them: on every server
#            `EVALSHA LOCK_SHA 1 resource value ttl yes` (an error counts as "no"); granted when a
#            quorum answered and ttl - elapsed - (ttl*0.01).to_i - 2 >= 0; otherwise the unlock
#            script on every server. Extension sends the same with the held value and "no"
#            (extend_only_if_locked), one try.
#   unlock:  `EVALSHA UNLOCK_SHA 1 resource value` on every server, errors ignored.
#   locked?/valid_lock?: `EVALSHA PTTL_SHA 1 resource`.
#   Any EVALSHA that meets NOSCRIPT: SCRIPT LOAD of unlock, lock and pttl, then the EVALSHA once
#   more. The gem speaks through redis-client, which opens with HELLO 3; ruby-redis speaks RESP2.
#
# Worker CLI contract (tests/libraries.rs):
#   ruby redlock_rb.rb --redis HOST:PORT --counter HOST:PORT --resource NAME --iterations N
#       --hold-ms MS [--no-lock]
# Loops {lock; GET counter; sleep; extend; valid_lock?; SET counter+1; unlock}; prints
# `check extend ok bad`, `check valid ok bad`, `tokens ...` and `done <successes>` last.
require 'digest'
require 'optparse'
require 'redis'
require 'securerandom'

LUA = File.join(__dir__, 'lua')
UNLOCK_SCRIPT = File.read(File.join(LUA, 'redlockrb_UNLOCK_SCRIPT.lua'))
LOCK_SCRIPT = File.read(File.join(LUA, 'redlockrb_LOCK_SCRIPT.lua'))
PTTL_SCRIPT = File.read(File.join(LUA, 'redlockrb_PTTL_SCRIPT.lua'))
UNLOCK_SHA = Digest::SHA1.hexdigest(UNLOCK_SCRIPT)
LOCK_SHA = Digest::SHA1.hexdigest(LOCK_SCRIPT)
PTTL_SHA = Digest::SHA1.hexdigest(PTTL_SCRIPT)

# One server, as the gem's RedisInstance.
class Instance
  def initialize(addr)
    host, port = addr.split(':')
    @redis = Redis.new(host: host, port: port.to_i, timeout: 5)
  end

  def lock(resource, value, ttl, allow_new_lock)
    recover_from_script_flush { @redis.call('EVALSHA', LOCK_SHA, 1, resource, value, ttl, allow_new_lock) }
  end

  def unlock(resource, value)
    recover_from_script_flush { @redis.call('EVALSHA', UNLOCK_SHA, 1, resource, value) }
  rescue StandardError
    nil
  end

  def remaining_ttl(resource)
    recover_from_script_flush { @redis.call('EVALSHA', PTTL_SHA, 1, resource) }
  end

  private

  def recover_from_script_flush
    retried = false
    begin
      yield
    rescue Redis::CommandError => e
      raise if retried || !e.message.include?('NOSCRIPT')

      [UNLOCK_SCRIPT, LOCK_SCRIPT, PTTL_SCRIPT].each { |s| @redis.call('SCRIPT', 'LOAD', s) }
      retried = true
      retry
    end
  end
end

# The gem's Redlock::Client, reduced to what the worker uses.
class Client
  def initialize(servers, retry_count:, retry_delay:, retry_jitter:)
    @servers = servers.map { |s| Instance.new(s) }
    @quorum = servers.length / 2 + 1
    @retry_count = retry_count
    @retry_delay = retry_delay
    @retry_jitter = retry_jitter
  end

  def lock(resource, ttl, extend: nil)
    tries = extend ? 1 : @retry_count + 1
    tries.times do |attempt|
      sleep((@retry_delay + rand(@retry_jitter)).to_f / 1000) if attempt.positive?
      info = lock_instances(resource, ttl, extend)
      return info if info
    end
    false
  end

  def unlock(info)
    @servers.each { |s| s.unlock(info[:resource], info[:value]) }
  end

  def valid_lock?(info)
    start = now_ms
    replies = @servers.map { |s| s.remaining_ttl(info[:resource]) }.select { |r| r&.first }
    by_value = replies.group_by(&:first).transform_values { |rs| rs.map(&:last) }
    value, ttls = by_value.max_by { |(_, t)| t.length }
    return false unless ttls && ttls.size >= @quorum && value == info[:value]

    min = ttls.sort.last(@quorum).first
    min - (now_ms - start) - drift(min) > 0
  end

  private

  def lock_instances(resource, ttl, extend)
    value = extend ? extend[:value] : SecureRandom.uuid
    allow_new_lock = extend ? 'no' : 'yes'
    start = now_ms
    locked = @servers.count do |s|
      s.lock(resource, value, ttl, allow_new_lock)
    rescue StandardError
      false
    end
    validity = ttl - (now_ms - start) - drift(ttl)
    return { validity: validity, resource: resource, value: value } if locked >= @quorum && validity >= 0

    @servers.each { |s| s.unlock(resource, value) }
    false
  end

  def drift(ttl)
    (ttl * 0.01).to_i + 2
  end

  def now_ms
    (Process.clock_gettime(Process::CLOCK_MONOTONIC) * 1000).to_i
  end
end

opts = { hold: 2, lock: true }
OptionParser.new do |o|
  o.on('--redis A') { |v| opts[:redis] = v }
  o.on('--counter A') { |v| opts[:counter] = v }
  o.on('--resource R') { |v| opts[:resource] = v }
  o.on('--iterations N', Integer) { |v| opts[:iterations] = v }
  o.on('--hold-ms MS', Integer) { |v| opts[:hold] = v }
  o.on('--no-lock') { opts[:lock] = false }
end.parse!

ch, cp = opts.fetch(:counter).split(':')
counter = Redis.new(host: ch, port: cp.to_i, timeout: 5)
# Many retries with a short delay, so workers contend often.
client = Client.new([opts.fetch(:redis)], retry_count: 100_000, retry_delay: 5, retry_jitter: 5)
key = "count:#{opts.fetch(:resource)}"
checks = { 'extend' => [0, 0], 'valid' => [0, 0] }
tokens = []
successes = 0
opts.fetch(:iterations).times do
  info = nil
  if opts[:lock]
    info = client.lock(opts[:resource], 2000)
    raise 'lock not acquired after every retry' unless info

    tokens << info[:value]
  end
  v = (counter.get(key) || 0).to_i
  sleep(opts[:hold] / 1000.0)
  if info
    checks['extend'][client.lock(opts[:resource], 2000, extend: info) ? 0 : 1] += 1
    checks['valid'][client.valid_lock?(info) ? 0 : 1] += 1
  end
  counter.set(key, v + 1)
  successes += 1
  client.unlock(info) if info
end
checks.each { |name, (ok, bad)| puts "check #{name} #{ok} #{bad}" }
puts "tokens #{tokens.join(',')}"
puts "done #{successes}"
