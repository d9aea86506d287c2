<?php
// Laravel's `Cache::lock` on the phpredis connection (illuminate/cache 12/13: RedisStore::lock
// gives a PhpRedisLock), its wire behaviour reproduced on Debian's php-redis. The framework is
// published on Packagist only, which is not reached here, so this is our own code making the
// same phpredis calls Illuminate\Cache\{Lock,RedisLock,PhpRedisLock} and
// Illuminate\Redis\Connections\PhpRedisConnection make:
// - owner: Str::random() (16 letters and digits) unless given;
// - acquire(): seconds > 0: $redis->set($name, $owner, ['NX', 'EX' => $seconds]) (phpredis sends
//   `SET name owner EX seconds NX`); seconds = 0: $redis->setnx($name, $owner) (no expiry);
// - release(): $redis->eval(LuaScripts::releaseLock(), [$name, $owner], 1), a plain EVAL of
//   tests/clients/lua/laravel_releaseLock.lua (byte for byte); true when it answered 1;
// - refresh($seconds): the same with LuaScripts::refreshLock() (laravel_refreshLock.lua) and
//   [$name, $owner, $seconds];
// - forceRelease(): $redis->del($name); getCurrentOwner(): $redis->get($name) (false when none);
// - get($callback): acquire, run, release; block($seconds, $callback): acquire, else sleep
//   betweenBlockedAttemptsSleepFor (250 ms by default) and try again until $seconds have passed,
//   then LockTimeoutException.
//
//   php laravel_lock.php api PROXY_PORT MASTER_PORT...
//   php laravel_lock.php refresh PROXY_PORT MASTER_PORT...     Lock::refresh()
//   php laravel_lock.php --redis HOST:PORT --counter HOST:PORT --resource NAME
//       --iterations N --hold-ms MS [--no-lock]        a contention worker: block(10, callback)

final class LockTimeoutException extends Exception
{
}

final class PhpRedisLock
{
    public int $sleepMilliseconds = 250;

    public function __construct(
        private \Redis $redis,
        public string $name,
        public int $seconds,
        public ?string $owner = null,
    ) {
        $this->owner ??= random_owner();
    }

    public function acquire(): bool
    {
        if ($this->seconds > 0) {
            return $this->redis->set($this->name, $this->owner, ['NX', 'EX' => $this->seconds]) == true;
        }
        return (int) $this->redis->setnx($this->name, $this->owner) === 1;
    }

    public function release(): bool
    {
        return (bool) $this->redis->eval(script('releaseLock'), [$this->name, $this->owner], 1);
    }

    public function refresh(?int $seconds = null): bool
    {
        $seconds ??= $this->seconds;
        return (bool) $this->redis->eval(script('refreshLock'), [$this->name, $this->owner, $seconds], 1);
    }

    public function forceRelease(): void
    {
        $this->redis->del($this->name);
    }

    public function isOwnedByCurrentProcess(): bool
    {
        $current = $this->redis->get($this->name);
        return ($current === false ? null : $current) === $this->owner;
    }

    public function get(?callable $callback = null): mixed
    {
        $result = $this->acquire();
        if ($result && $callback) {
            try {
                return $callback();
            } finally {
                $this->release();
            }
        }
        return $result;
    }

    public function block(int $seconds, ?callable $callback = null): mixed
    {
        $starting = microtime(true) * 1000;
        $milliseconds = $seconds * 1000;
        while (!$this->acquire()) {
            $now = microtime(true) * 1000;
            if (($now + $this->sleepMilliseconds - $milliseconds) >= $starting) {
                throw new LockTimeoutException();
            }
            usleep($this->sleepMilliseconds * 1000);
        }
        if ($callback) {
            try {
                return $callback();
            } finally {
                $this->release();
            }
        }
        return true;
    }
}

function script(string $name): string
{
    return file_get_contents(__DIR__ . "/lua/laravel_$name.lua");
}

function random_owner(): string
{
    $chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
    $s = '';
    for ($i = 0; $i < 16; $i++) {
        $s .= $chars[random_int(0, 61)];
    }
    return $s;
}

function connect_to(string $host, int $port): \Redis
{
    $r = new \Redis();
    $r->connect($host, $port, 30);
    return $r;
}

function check(bool $ok, string $what): void
{
    if (!$ok) {
        fwrite(STDERR, "FAILED: $what\n");
        exit(1);
    }
}

/** `$pred` holds on a majority of the masters behind the proxy. */
function on_majority(array $masters, callable $pred, string $what): void
{
    $n = count(array_filter($masters, $pred));
    check($n > intdiv(count($masters), 2), "$what on $n of " . count($masters) . ' masters');
}

function api(int $proxy, array $masterPorts): void
{
    $r = connect_to('127.0.0.1', $proxy);
    $masters = array_map(fn ($p) => connect_to('127.0.0.1', $p), $masterPorts);
    $lock = fn (string $name, int $seconds, ?string $owner = null) => new PhpRedisLock($r, $name, $seconds, $owner);

    // get(): acquire, run, release; a second lock meanwhile is refused.
    $a = $lock('lv:a', 10);
    $inside = $a->get(function () use ($a, $lock, $masters) {
        check($a->isOwnedByCurrentProcess(), 'owned inside get()');
        check($lock('lv:a', 10)->get() === false, 'a second lock is refused');
        on_majority($masters, fn ($m) => $m->ttl('lv:a') > 8 && $m->ttl('lv:a') <= 10, 'EX TTL');
        return 'ran';
    });
    check($inside === 'ran', 'get() ran the callback');
    on_majority($masters, fn ($m) => $m->exists('lv:a') === 0, 'released after get()');

    // release(): only the owner's; restoring a lock by owner (Cache::restoreLock) releases it.
    $a = $lock('lv:b', 10);
    check($a->acquire(), 'acquire');
    check(!$lock('lv:b', 10)->release(), "release by another owner");
    check($lock('lv:b', 10, $a->owner)->release(), 'release by the restored owner');
    check(!$a->release(), 'release again');

    // block(): waits (sleeping between attempts) until the holder's lock is gone: here it
    // expires, as a crashed holder's does.
    $dead = $lock('lv:c', 1);
    check($dead->acquire(), 'a holder that will never release');
    $b = $lock('lv:c', 10);
    $b->sleepMilliseconds = 50;
    $began = microtime(true);
    check($b->block(5) === true, 'block() got the lock');
    $waited = microtime(true) - $began;
    check($waited > 0.5, "block() waited for the expiry: $waited s");

    // block() gives up with LockTimeoutException while someone holds it.
    $c = $lock('lv:c', 10);
    $c->sleepMilliseconds = 50;
    $began = microtime(true);
    try {
        $c->block(1);
        check(false, 'block() must time out');
    } catch (LockTimeoutException) {
        $waited = microtime(true) - $began;
        check($waited > 0.8, "timed out after trying for a second: $waited s");
    }

    // forceRelease(): deletes whoever holds it; the old owner's release then answers false.
    $c->forceRelease();
    on_majority($masters, fn ($m) => $m->exists('lv:c') === 0, 'force-released');
    check($c->acquire(), 'taken after forceRelease');
    check(!$b->release(), "the old owner's release after forceRelease");
    check($c->isOwnedByCurrentProcess() && !$b->isOwnedByCurrentProcess(), 'owners');
    check($c->release(), 'release');

    // A lock without seconds is SETNX with no expiry: the proxy's deadlock guard gives it a TTL.
    $forever = $lock('lv:d', 0);
    check($forever->acquire(), 'SETNX lock');
    check(!$lock('lv:d', 0)->acquire(), 'a second SETNX lock is refused');
    $plain = in_array($proxy, $masterPorts, true); // one Redis: such a lock never expires
    on_majority($masters, fn ($m) => $plain ? $m->ttl('lv:d') === -1 : $m->ttl('lv:d') > 0, 'the deadlock guard TTL');
    check($forever->release(), 'SETNX lock released');
    echo "ok\n";
}

/** Lock::refresh(): extends the owner's lock in seconds; another owner's refresh is refused. */
function refresh(int $proxy, array $masterPorts): void
{
    $r = connect_to('127.0.0.1', $proxy);
    $masters = array_map(fn ($p) => connect_to('127.0.0.1', $p), $masterPorts);
    $a = new PhpRedisLock($r, 'lv:r', 5);
    check($a->acquire(), 'acquire');
    check($a->refresh(30), 'refresh: ' . $r->getLastError());
    on_majority($masters, fn ($m) => $m->ttl('lv:r') > 25, 'refreshed TTL');
    check(!(new PhpRedisLock($r, 'lv:r', 5))->refresh(60), "another owner's refresh");
    // refresh(0) would PERSIST the lock on one Redis (a lock that never expires): never here.
    $a->refresh(0);
    on_majority($masters, fn ($m) => $m->ttl('lv:r') > 0, 'still expires after refresh(0)');
    check($a->release(), 'release');
    check(!$a->refresh(30), 'refresh of a released lock');
    echo "ok\n";
}

if (in_array($argv[1] ?? '', ['api', 'refresh'], true)) {
    $ports = array_map('intval', array_slice($argv, 3));
    ($argv[1])((int) $argv[2], $ports);
    exit(0);
}

$opts = getopt('', ['redis:', 'counter:', 'resource:', 'iterations:', 'hold-ms:', 'no-lock']);
[$rh, $rp] = explode(':', $opts['redis']);
[$ch, $cp] = explode(':', $opts['counter']);
$r = connect_to($rh, (int) $rp);
$counter = connect_to($ch, (int) $cp);
$key = 'count:' . $opts['resource'];
$done = 0;
$owned = [0, 0];
$section = function () use ($counter, $key, $opts, &$done) {
    $v = (int) $counter->get($key);
    usleep((int) $opts['hold-ms'] * 1000);
    $counter->set($key, (string) ($v + 1));
    $done++;
};
for ($i = 0; $i < (int) $opts['iterations']; $i++) {
    if (isset($opts['no-lock'])) {
        $section();
        continue;
    }
    $lock = new PhpRedisLock($r, $opts['resource'], 10);
    $lock->sleepMilliseconds = 10;
    while (true) {
        try {
            $lock->block(10, function () use ($lock, $section, &$owned) {
                $owned[$lock->isOwnedByCurrentProcess() ? 0 : 1]++;
                $section();
            });
            break;
        } catch (RedisException | LockTimeoutException $e) {
            usleep(50000); // the application tries again
        }
    }
}
echo "check owned {$owned[0]} {$owned[1]}\n";
echo "done $done\n";
