package redistest

import (
	"os"
	"strings"
)

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logTail returns the end of what redis-server wrote to its stdout/stderr and
// log file since the given offsets.
func (s *Server) logTail(logOff, outOff int64) string {
	var b strings.Builder
	if t := tailFrom(s.outPath, outOff); t != "" {
		b.WriteString(t)
	}
	if t := tailFrom(s.logPath, logOff); t != "" {
		b.WriteString(t)
	}
	if b.Len() == 0 {
		return "(empty)"
	}
	return b.String()
}

// tailFrom returns at most the last 30 lines / 4 KiB of path after offset.
func tailFrom(path string, off int64) string {
	const maxBytes, maxLines = 4096, 30
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) <= off {
		return ""
	}
	b = b[off:]
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n") + "\n"
}
