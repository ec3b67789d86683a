package grpclimit

import (
	"fmt"
	"strings"
)

// patternKind is what a method pattern matches, from the most specific.
type patternKind uint8

const (
	matchMethod  patternKind = iota // "/pkg.Service/Method"
	matchService                    // "/pkg.Service/*"
	matchAll                        // "*"
)

// parsePattern checks a method pattern and returns its kind and the key it
// is looked up by: the full method name, the service prefix with its
// trailing slash ("/pkg.Service/"), or "" for "*".
func parsePattern(p string) (patternKind, string, error) {
	if p == "*" {
		return matchAll, "", nil
	}
	bad := func(why string) error {
		return fmt.Errorf(`method pattern %q: %s; write "/pkg.Service/Method", "/pkg.Service/*" or "*"`, p, why)
	}
	if !strings.HasPrefix(p, "/") {
		return 0, "", bad("it does not start with /")
	}
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return 0, "", bad("no service")
	}
	service, method := p[1:i], p[i+1:]
	switch {
	case service == "":
		return 0, "", bad("no service")
	case strings.ContainsAny(service, "/*"):
		return 0, "", bad("a service name holds neither / nor *")
	case method == "":
		return 0, "", bad("no method (\"/pkg.Service/*\" for all of them)")
	case method == "*":
		return matchService, p[:i+1], nil
	case strings.Contains(method, "*"):
		return 0, "", bad("* stands only for a whole method name")
	}
	return matchMethod, p, nil
}

// router finds the route of a full method name: its own, else its
// service's, else the catch-all.
type router struct {
	method  map[string]*route
	service map[string]*route // by "/pkg.Service/"
	all     *route
}

func (rt *router) add(p string, r *route) error {
	kind, key, err := parsePattern(p)
	if err != nil {
		return err
	}
	var m map[string]*route
	switch kind {
	case matchAll:
		if rt.all != nil {
			return fmt.Errorf("method pattern %q appears twice", p)
		}
		rt.all = r
		return nil
	case matchService:
		m = rt.service
	default:
		m = rt.method
	}
	if m[key] != nil {
		return fmt.Errorf("method pattern %q appears twice", p)
	}
	m[key] = r
	return nil
}

// match returns the route of fullMethod ("/pkg.Service/Method"), nil if
// none matches. It does not allocate.
func (rt *router) match(fullMethod string) *route {
	if r := rt.method[fullMethod]; r != nil {
		return r
	}
	if len(rt.service) > 0 {
		if i := strings.LastIndexByte(fullMethod, '/'); i > 0 {
			if r := rt.service[fullMethod[:i+1]]; r != nil {
				return r
			}
		}
	}
	return rt.all
}
