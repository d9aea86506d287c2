// A driver that reproduces the wire behaviour of redsync v4 (github.com/go-redsync/redsync) with
// its go-redis adapter, on Debian's redigo: redsync is not packaged in Debian and the Go module
// proxy is not for fetching it, so this is our own code sending what redsync + go-redis send, in
// their order (built offline in GOPATH mode by tests/libraries.rs):
//
//	Lock:    value = 16 random bytes, base64; up to `tries` attempts, a pause between them:
//	         `set name value ex <s> nx` when the expiry is whole seconds, else
//	         `set name value px <ms> nx` (go-redis's SetNX, lowercase); granted when a quorum said
//	         OK and now is before start + expiry - elapsed - expiry*0.01; otherwise the delete
//	         script on every pool.
//	Unlock:  the delete script (1 deleted, 0 someone else's, -1 already expired).
//	Extend:  the touch script with the expiry in ms.
//	Scripts: `evalsha <sha1> 1 ...`, and `eval <src> 1 ...` when the error contains "NOSCRIPT ".
//	         Their texts are read from tests/clients/lua/redsync_{delete,touch}Script.lua, which
//	         hold redsync's scripts byte for byte.
//
// go-redis v9 also opens with `hello 3` and `client setinfo`; redigo speaks RESP2 and sends none.
//
// Worker CLI contract (tests/libraries.rs):
//
//	redsync --redis HOST:PORT --counter HOST:PORT --resource NAME --iterations N --hold-ms MS
//	    [--no-lock] [--lua DIR]
//
// Loops {Lock; GET counter; sleep; Extend; SET counter+1; Unlock}; prints `check extend ok bad`,
// `check unlock ok bad`, `tokens ...` and `done <successes>` last.
package main

import (
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

type script struct{ src, hash string }

func loadScript(dir, name string) script {
	b, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		panic(err)
	}
	sum := sha1.Sum(b)
	return script{string(b), hex.EncodeToString(sum[:])}
}

var errExpired = errors.New("redsync: failed to unlock, lock was already expired")

type mutex struct {
	name          string
	expiry        time.Duration
	tries         int
	delay         func() time.Duration
	quorum        int
	value         string
	pools         []*redis.Pool
	delete, touch script
}

// eval is the go-redis adapter's Eval: EVALSHA, then EVAL on "NOSCRIPT ".
func eval(c redis.Conn, s script, keysAndArgs ...interface{}) (interface{}, error) {
	v, err := c.Do("evalsha", append([]interface{}{s.hash, 1}, keysAndArgs...)...)
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT ") {
		v, err = c.Do("eval", append([]interface{}{s.src, 1}, keysAndArgs...)...)
	}
	return v, err
}

func (m *mutex) each(act func(redis.Conn) (bool, error)) int {
	n := 0
	for _, p := range m.pools {
		c := p.Get()
		ok, _ := act(c)
		c.Close()
		if ok {
			n++
		}
	}
	return n
}

func (m *mutex) acquire(c redis.Conn, value string) (bool, error) {
	var reply interface{}
	var err error
	if m.expiry >= time.Second && m.expiry%time.Second == 0 {
		reply, err = c.Do("set", m.name, value, "ex", int64(m.expiry/time.Second), "nx")
	} else {
		reply, err = c.Do("set", m.name, value, "px", int64(m.expiry/time.Millisecond), "nx")
	}
	s, _ := redis.String(reply, err)
	return s == "OK", err
}

func (m *mutex) release(c redis.Conn, value string) (bool, error) {
	status, err := redis.Int64(eval(c, m.delete, m.name, value))
	if err != nil {
		return false, err
	}
	if status == -1 {
		return false, errExpired
	}
	return status != 0, nil
}

func (m *mutex) Lock() error {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	value := base64.StdEncoding.EncodeToString(b)
	for i := 0; i < m.tries; i++ {
		if i != 0 {
			time.Sleep(m.delay())
		}
		start := time.Now()
		n := m.each(func(c redis.Conn) (bool, error) { return m.acquire(c, value) })
		now := time.Now()
		until := now.Add(m.expiry - now.Sub(start) - time.Duration(int64(float64(m.expiry)*0.01)))
		if n >= m.quorum && now.Before(until) {
			m.value = value
			return nil
		}
		m.each(func(c redis.Conn) (bool, error) { return m.release(c, value) })
	}
	return errors.New("redsync: failed to acquire lock")
}

func (m *mutex) Unlock() bool {
	return m.each(func(c redis.Conn) (bool, error) { return m.release(c, m.value) }) >= m.quorum
}

func (m *mutex) Extend() bool {
	ms := int(m.expiry / time.Millisecond)
	return m.each(func(c redis.Conn) (bool, error) {
		status, err := redis.Int64(eval(c, m.touch, m.name, m.value, ms))
		return err == nil && status != 0, err
	}) >= m.quorum
}

func pool(addr string) *redis.Pool {
	return &redis.Pool{MaxIdle: 2, Dial: func() (redis.Conn, error) {
		return redis.Dial("tcp", addr, redis.DialReadTimeout(5*time.Second), redis.DialWriteTimeout(5*time.Second))
	}}
}

func main() {
	addr := flag.String("redis", "", "lock server")
	counterAddr := flag.String("counter", "", "counter server")
	resource := flag.String("resource", "", "lock name")
	iterations := flag.Int("iterations", 0, "critical sections")
	hold := flag.Int("hold-ms", 2, "ms inside")
	noLock := flag.Bool("no-lock", false, "bypass the lock")
	lua := flag.String("lua", "tests/clients/lua", "folder of the library scripts")
	expiry := flag.Int("expiry-ms", 2000, "lock expiry: whole seconds go out as `ex`, others as `px`")
	flag.Parse()

	m := &mutex{
		name:   *resource,
		expiry: time.Duration(*expiry) * time.Millisecond,
		tries:  100000,
		// Short pauses (redsync's default is 50-250 ms), so workers contend often.
		delay:  func() time.Duration { return time.Duration(3+mrand.Intn(5)) * time.Millisecond },
		quorum: 1,
		pools:  []*redis.Pool{pool(*addr)},
		delete: loadScript(*lua, "redsync_deleteScript.lua"),
		touch:  loadScript(*lua, "redsync_touchScript.lua"),
	}
	counter := pool(*counterAddr).Get()
	key := "count:" + *resource
	checks := map[string]*[2]int{"extend": {}, "unlock": {}}
	var tokens []string
	successes := 0
	for i := 0; i < *iterations; i++ {
		if !*noLock {
			if err := m.Lock(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			tokens = append(tokens, m.value)
		}
		v, _ := redis.String(counter.Do("GET", key))
		n, _ := strconv.Atoi(v)
		time.Sleep(time.Duration(*hold) * time.Millisecond)
		if !*noLock {
			if m.Extend() {
				checks["extend"][0]++
			} else {
				checks["extend"][1]++
			}
		}
		if _, err := counter.Do("SET", key, n+1); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		successes++
		if !*noLock {
			if m.Unlock() {
				checks["unlock"][0]++
			} else {
				checks["unlock"][1]++
			}
		}
	}
	for _, name := range []string{"extend", "unlock"} {
		fmt.Printf("check %s %d %d\n", name, checks[name][0], checks[name][1])
	}
	fmt.Printf("tokens %s\n", strings.Join(tokens, ","))
	fmt.Printf("done %d\n", successes)
}
