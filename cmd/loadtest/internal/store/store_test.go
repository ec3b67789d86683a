package store

import (
	"context"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, c := range []struct {
		in      string
		addrs   []string
		cluster bool
		db      int
		user    string
	}{
		{"127.0.0.1:6380", []string{"127.0.0.1:6380"}, false, 0, ""},
		{"redis://127.0.0.1:6380/2", []string{"127.0.0.1:6380"}, false, 2, ""},
		{"redis://u:p@127.0.0.1:6380", []string{"127.0.0.1:6380"}, false, 0, "u"},
		{"redis://127.0.0.1:7000?addr=127.0.0.1:7001&addr=127.0.0.1:7002", []string{"127.0.0.1:7000", "127.0.0.1:7001", "127.0.0.1:7002"}, true, 0, ""},
		{"127.0.0.1:7000, redis://127.0.0.1:7001", []string{"127.0.0.1:7000", "127.0.0.1:7001"}, true, 0, ""},
	} {
		got, err := Parse(c.in)
		if err != nil {
			t.Errorf("%q: %v", c.in, err)
			continue
		}
		if len(got.Addrs) != len(c.addrs) || got.Cluster != c.cluster || got.DB != c.db || got.Username != c.user {
			t.Errorf("%q: %+v", c.in, got)
			continue
		}
		for i := range c.addrs {
			if got.Addrs[i] != c.addrs[i] {
				t.Errorf("%q: addrs %v", c.in, got.Addrs)
			}
		}
	}
	for _, bad := range []string{"", "localhost", "http://x:1", "redis://x:1,nope"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	tg, _ := Parse("redis://u:secret@127.0.0.1:1")
	if s := tg.String(); s == "" || contains(s, "secret") {
		t.Errorf("String leaks or is empty: %q", s)
	}
	if tg.Seal().Unseal().Password != "secret" {
		t.Error("seal/unseal lost the password")
	}
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

func TestEmbedded(t *testing.T) {
	e, tg, err := StartEmbedded()
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tg, err = tg.Detect(ctx)
	if err != nil || tg.Cluster || !tg.Embedded {
		t.Fatalf("detect: %+v %v", tg, err)
	}
	c := tg.Client()
	defer c.Close()
	if err := c.Set(ctx, "a", "b", 0).Err(); err != nil {
		t.Fatal(err)
	}
	e.Stop()
	if err := c.Get(ctx, "a").Err(); err == nil {
		t.Error("a stopped server answered")
	}
	if err := e.Restart(); err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get(ctx, "a").Result(); err != nil || v != "b" {
		t.Errorf("after restart: %q %v", v, err)
	}
}
