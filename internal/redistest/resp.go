package redistest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// A tiny RESP2 client used for readiness and health probes. It avoids
// go-redis here so that probing never starts background goroutines, never
// retries behind our back and never logs.

// replyError is an error reply ("-ERR ...") from the server.
type replyError string

func (e replyError) Error() string { return string(e) }

// maxBulk bounds the size of a bulk reply the probe client accepts.
const maxBulk = 16 << 20

// do sends cmds on one fresh connection and returns one reply per command.
// The whole exchange is bounded by timeout and aborted when ctx is done.
func do(ctx context.Context, addr string, timeout time.Duration, cmds ...[]string) ([]any, error) {
	return doTLS(ctx, addr, nil, timeout, cmds...)
}

// doTLS is do over TLS with the client configuration tc (plain TCP when tc
// is nil).
func doTLS(ctx context.Context, addr string, tc *tls.Config, timeout time.Duration, cmds ...[]string) ([]any, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var conn net.Conn
	var err error
	if tc != nil {
		d := tls.Dialer{Config: tc}
		conn, err = d.DialContext(ctx, "tcp", addr)
	} else {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// Unblock reads and writes as soon as ctx is cancelled.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	var b bytes.Buffer
	for _, c := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := conn.Write(b.Bytes()); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	replies := make([]any, 0, len(cmds))
	for range cmds {
		v, err := readReply(r, 0)
		if err != nil {
			return nil, err
		}
		replies = append(replies, v)
	}
	return replies, nil
}

// readReply reads one RESP2 reply: string, int64, nil, []any or an error
// (replyError for "-" replies).
func readReply(r *bufio.Reader, depth int) (any, error) {
	if depth > 8 {
		return nil, errors.New("redistest: reply nested too deeply")
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("redistest: malformed reply line %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+':
		return body, nil
	case '-':
		return nil, replyError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil || n > maxBulk {
			return nil, fmt.Errorf("redistest: bad bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil || n > 1<<20 {
			return nil, fmt.Errorf("redistest: bad array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, 0, n)
		for range n {
			v, err := readReply(r, depth+1)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		return arr, nil
	default:
		return nil, fmt.Errorf("redistest: unexpected reply type %q", kind)
	}
}
