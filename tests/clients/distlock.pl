#!/usr/bin/perl
# A driver that reproduces the wire behaviour of Redis::DistLock 0.07 (CPAN; sbertrang/redis-distlock)
# on Debian's libredis-perl: CPAN is not reachable from here, so this is our own code sending what
# the library sends, in the same order:
#   new():     per server INFO (its version check), SCRIPT LOAD of RELEASE_SCRIPT, SCRIPT LOAD of
#              EXTEND_SCRIPT (the scripts below are the library's, byte for byte; so are
#              tests/clients/lua/distlock_*.lua);
#   lock($resource, $ttl_seconds [, $value [, $extend]]):
#              value = 24 bytes from rand(), base64, unless one is given (the documented form takes
#              e.g. a host name); up to retry_count times: `SET resource value NX PX ttl*1000` (or,
#              to extend, EVALSHA of EXTEND_SCRIPT) on every server, errors logged and counted as
#              "no"; granted when a quorum said yes and ttl - elapsed - (ttl*0.01 + 0.002) > 0;
#              otherwise a random pause in [0, retry_delay) s. No clean-up of a failed attempt.
#   release:   EVALSHA of RELEASE_SCRIPT on every server (never EVAL).
#
# Usage (tests/libraries.rs):
#   perl distlock.pl --redis HOST:PORT --counter HOST:PORT --resource NAME --iterations N
#       --hold-ms MS [--no-lock] [--host-value]
#     Worker CLI contract: loops {lock; GET counter; sleep; SET counter+1; release}, prints
#     `done <successes>` last. --host-value locks with the host name as value (every worker alike).
#   perl distlock.pl --probe --redis HOST:PORT --resource NAME
#     Prints one line per step of: lock, extend of the held lock (with what the logger got), a
#     second caller with the same host-name value, release.
use strict;
use warnings;

use Digest::SHA qw(sha1_hex);
use Getopt::Long;
use MIME::Base64 qw(encode_base64);
use Redis;
use Sys::Hostname qw(hostname);
use Time::HiRes qw(time usleep);

package DistLockWire;

use Digest::SHA qw(sha1_hex);
use MIME::Base64 qw(encode_base64);
use Time::HiRes qw(time);

sub RELEASE_SCRIPT() { '
if redis.call( "get", KEYS[1] ) == ARGV[1] then
    return redis.call( "del", KEYS[1] )
else
    return 0
end
' }
sub EXTEND_SCRIPT() { '
if redis.call( "set", KEYS[1], ARGV[1], "XX", "PX", ARGV[2] ) then
    return "OK"
else
    return redis.call( "set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2] )
end
' }

sub new {
    my ( $class, %args ) = @_;
    my @servers;
    for my $server ( @{ $args{servers} } ) {
        my $redis = Redis->new( server => $server, encoding => undef );
        my $info = $redis->info();
        die "no redis_version in INFO\n" unless $info && $info->{redis_version};
        $redis->script_load(RELEASE_SCRIPT) eq sha1_hex(RELEASE_SCRIPT) or die "release sha1\n";
        $redis->script_load(EXTEND_SCRIPT) eq sha1_hex(EXTEND_SCRIPT) or die "extend sha1\n";
        push @servers, $redis;
    }
    return bless {
        servers     => \@servers,
        quorum      => int( @servers / 2 + 1 ),
        retry_count => $args{retry_count} || 3,
        retry_delay => $args{retry_delay} || 0.2,
        logger      => $args{logger} || sub { warn @_ },
    }, $class;
}

sub lock {
    my ( $self, $resource, $ttl, $value, $extend ) = @_;
    my $retry_count = $self->{retry_count};
    $value = encode_base64( join( "", map chr( int( rand() * 256 ) ), 1 .. 24 ), "" )
        unless defined $value;
    while ( $retry_count-- > 0 ) {
        my $start = time();
        my $ok    = 0;
        for my $redis ( @{ $self->{servers} } ) {
            $ok += eval {
                !$extend
                    ? $redis->set( $resource, $value, "NX", "PX", $ttl * 1000 )
                    : $redis->evalsha( sha1_hex(EXTEND_SCRIPT), 1, $resource, $value, $ttl * 1000 );
            } ? 1 : 0;
            $self->{logger}->($@) if $@;
        }
        my $validity = $ttl - ( time() - $start ) - ( $ttl * 0.01 + 0.002 );
        if ( $ok >= $self->{quorum} && $validity > 0 ) {
            return { validity => $validity, resource => $resource, value => $value };
        }
        select( undef, undef, undef, rand( $self->{retry_delay} ) );
    }
    return undef;
}

sub release {
    my ( $self, $lock ) = @_;
    my @r;
    push @r, $_->evalsha( sha1_hex(RELEASE_SCRIPT), 1, $lock->{resource}, $lock->{value} )
        for @{ $self->{servers} };
    return @r;
}

package main;

my %o = ( 'hold-ms' => 2 );
GetOptions( \%o, 'redis=s', 'counter=s', 'resource=s', 'iterations=i', 'hold-ms=i', 'no-lock',
    'host-value', 'probe' ) or exit 2;

if ( $o{probe} ) {
    my $logged = '';
    my $dl = DistLockWire->new(
        servers     => [ $o{redis} ],
        retry_count => 1,
        logger      => sub { $logged .= join( '', @_ ) },
    );
    my $res  = $o{resource};
    my $lock = $dl->lock( $res, 5 );
    print "lock ", ( $lock ? "granted" : "refused" ), "\n";
    my $ext = $dl->lock( $res, 5, $lock->{value}, 1 );
    $logged =~ s/\s+at \S+ line \d+\.?\s*$//;
    print "extend ", ( $ext ? "granted" : "refused" ), " logged: $logged\n";
    print "release ", join( ',', $dl->release($lock) ), "\n";
    my $host   = hostname();
    my $first  = $dl->lock( "$res:host", 5, $host );
    my $second = $dl->lock( "$res:host", 5, $host );
    print "same value: first ", ( $first ? "granted" : "refused" ), ", second ",
        ( $second ? "granted" : "refused" ), "\n";
    print "release ", join( ',', $dl->release($first) ), "\n";
    exit 0;
}

for my $need (qw(redis counter resource iterations)) {
    die "missing --$need\n" unless defined $o{$need};
}
my $counter = Redis->new( server => $o{counter} );
# Many retries with a short delay, so workers contend often.
my $dl = DistLockWire->new( servers => [ $o{redis} ], retry_count => 100000, retry_delay => 0.01 );
my $key       = "count:$o{resource}";
my $value     = $o{'host-value'} ? hostname() : undef;
my $successes = 0;
my @drawn;
for ( 1 .. $o{iterations} ) {
    my $lock;
    unless ( $o{'no-lock'} ) {
        $lock = $dl->lock( $o{resource}, 2, $value ) or next;
        push @drawn, $lock->{value};
    }
    my $v = $counter->get($key) // 0;
    usleep( $o{'hold-ms'} * 1000 );
    $counter->set( $key, $v + 1 );
    $successes++;
    $dl->release($lock) if $lock;
}
# With --host-value every worker uses the same value: that is the point, not a repeat to excuse.
print "tokens ", join( ',', $o{'host-value'} ? () : @drawn ), "\n";
print "done $successes\n";
