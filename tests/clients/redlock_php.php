<?php
// A driver that reproduces the wire behaviour of redlock-php (ronnylt/redlock-php) on Debian's
// php-redis: the library itself is published on Packagist only, which the project does not use,
// so this is our own code sending what it sends. What it sends, per attempt: a token from
// uniqid(); `SET resource token NX PX ttl` to every server in turn; a grant when a quorum said OK
// and `ttl - elapsed - (ttl * 0.01 + 2)` is positive; otherwise the compare-and-delete unlock
// script on every server, then a random pause in [delay/2, delay] ms before the next attempt.
//
// Worker CLI contract (tests/libraries.rs):
//   php redlock_php.php --redis HOST:PORT --counter HOST:PORT --resource NAME
//       --iterations N --hold-ms MS [--no-lock]
// Loops {lock; GET counter; sleep; SET counter+1; unlock} and prints `done <successes>` last.

const UNLOCK_LUA = '
            if redis.call("GET", KEYS[1]) == ARGV[1] then
                return redis.call("DEL", KEYS[1])
            else
                return 0
            end
        ';

/** Connections to the lock servers (here: the proxy alone). */
function connect_all(array $servers): array
{
    $out = [];
    foreach ($servers as [$host, $port]) {
        $r = new \Redis();
        $r->connect($host, $port, 5);
        $out[] = $r;
    }
    return $out;
}

function release_on(array $conns, string $resource, string $token): void
{
    foreach ($conns as $r) {
        $r->eval(UNLOCK_LUA, [$resource, $token], 1);
    }
}

/** Every token this worker drew, printed at the end so the test can see repeats across workers. */
$drawn = [];

/** Tries up to $attempts times; the lock (resource, token, validity ms, granted at µs) or null. */
function acquire(array $conns, string $resource, int $ttl, int $delayMs, int $attempts): ?array
{
    global $drawn;
    $token = uniqid();
    $drawn[] = $token;
    $needed = min(count($conns), count($conns) / 2 + 1);
    for ($left = $attempts; $left > 0; $left--) {
        $began = microtime(true) * 1000;
        $yes = 0;
        foreach ($conns as $r) {
            if ($r->set($resource, $token, ['NX', 'PX' => $ttl])) {
                $yes++;
            }
        }
        $validity = $ttl - (microtime(true) * 1000 - $began) - ($ttl * 0.01 + 2);
        if ($yes >= $needed && $validity > 0) {
            return [$resource, $token, $validity, (int)($began * 1000)];
        }
        release_on($conns, $resource, $token);
        usleep(mt_rand(intdiv($delayMs, 2), $delayMs) * 1000);
    }
    return null;
}

$opts = getopt('', ['redis:', 'counter:', 'resource:', 'iterations:', 'hold-ms:', 'no-lock']);
foreach (['redis', 'counter', 'resource', 'iterations', 'hold-ms'] as $need) {
    if (!isset($opts[$need])) {
        fwrite(STDERR, "missing --$need\n");
        exit(2);
    }
}
list($rh, $rp) = explode(':', $opts['redis']);
list($ch, $cp) = explode(':', $opts['counter']);
$useLock = !isset($opts['no-lock']);
$counter = new \Redis();
$counter->connect($ch, (int)$cp, 5);
// A short retry delay and many retries, so workers contend often.
$servers = connect_all([[$rh, (int)$rp]]);
$key = 'count:' . $opts['resource'];
$successes = 0;
// One `cs` line per critical section, so a lost update can be traced to its cause: token,
// counter value read, wall-clock µs when the attempt began / the section was entered / left,
// and the validity the grant was computed with.
$sections = [];
for ($i = 0; $i < (int)$opts['iterations']; $i++) {
    $lock = $useLock ? acquire($servers, $opts['resource'], 2000, 10, 1000) : ['', ''];
    if ($lock === null) {
        continue;
    }
    $entered = (int)(microtime(true) * 1e6);
    $v = (int)$counter->get($key);
    usleep((int)$opts['hold-ms'] * 1000);
    $counter->set($key, (string)($v + 1));
    $successes++;
    if ($useLock) {
        $left = (int)(microtime(true) * 1e6);
        $sections[] = sprintf('cs %s %d %d %d %d %.1f', $lock[1], $v, $lock[3], $entered, $left, $lock[2]);
    }
    if ($useLock) {
        release_on($servers, $lock[0], $lock[1]);
    }
}
echo implode("\n", $sections) . (count($sections) ? "\n" : '');
echo 'tokens ' . implode(',', $drawn) . "\n";
echo "done $successes\n";
