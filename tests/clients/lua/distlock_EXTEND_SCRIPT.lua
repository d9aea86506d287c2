
if redis.call( "set", KEYS[1], ARGV[1], "XX", "PX", ARGV[2] ) then
    return "OK"
else
    return redis.call( "set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2] )
end
