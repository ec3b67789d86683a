package main

import (
	"errors"
	"io"
	"net/http"
	"sync/atomic"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// httpHandler serves serve's HTTP endpoints, as envoyproxy/ratelimit
// names them:
//
//   - POST /json: a RateLimitRequest as protojson, answered with the
//     RateLimitResponse as protojson; 200 if OK, 429 if OVER_LIMIT; 400
//     with the reason for a body that does not parse or a request out of
//     bounds, 413 for a body over maxMessage, 503 while stopping.
//   - GET /healthcheck: 200 "OK" while serving, 503 once stopping.
//   - GET /metrics: the limiter's metrics in Prometheus' text format.
func httpHandler(s *service, stopping *atomic.Bool, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxMessage))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				http.Error(w, "the body is over 4 MiB", http.StatusRequestEntityTooLarge)
				return
			}
			http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
			return
		}
		var req rlspb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "the body is not a RateLimitRequest in protojson: "+err.Error(), http.StatusBadRequest)
			return
		}
		if stopping.Load() {
			http.Error(w, "sluice: the server is shutting down", http.StatusServiceUnavailable)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			code := http.StatusServiceUnavailable
			if status.Code(err) == codes.InvalidArgument {
				code = http.StatusBadRequest
			}
			http.Error(w, status.Convert(err).Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
	mux.HandleFunc("GET /healthcheck", func(w http.ResponseWriter, _ *http.Request) {
		if stopping.Load() {
			http.Error(w, "stopping", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "OK")
	})
	return mux
}
