package httplimit

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// ProblemContentType is the media type of an RFC 9457 problem details body.
const ProblemContentType = "application/problem+json"

// Problem is an RFC 9457 problem details object, the body of the
// middleware's own error responses.
type Problem struct {
	// Type is a URI reference that identifies the problem type; "about:blank"
	// means the problem is what Status says and no more.
	Type string `json:"type"`
	// Title is a short summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence of the problem.
	Detail string `json:"detail,omitempty"`
	// Instance is a URI reference that identifies this occurrence.
	Instance string `json:"instance,omitempty"`
	// RetryAfter is an extension member: the whole seconds to wait before a
	// retry can succeed, as in the Retry-After header; omitted when 0.
	RetryAfter int64 `json:"retry-after,omitempty"`
}

// Write sends p as the response: Content-Type application/problem+json, the
// status p.Status, the JSON body. Headers set on w before stay.
func (p Problem) Write(w http.ResponseWriter) {
	body, err := json.Marshal(p)
	if err != nil { // a Problem always marshals; keep the status anyway
		body = []byte(`{"type":"about:blank","status":` + strconv.Itoa(p.Status) + `}`)
	}
	h := w.Header()
	h.Set("Content-Type", ProblemContentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(body)
}
