package config

import (
	"errors"
	"fmt"
	"strings"
)

// LogLevel is a logging severity, as Horovod names them.
type LogLevel int8

// The levels, least severe first.
const (
	LevelTrace LogLevel = iota
	LevelDebug
	LevelInfo
	LevelWarning
	LevelError
	LevelFatal
)

var levelNames = [...]string{"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"}

var errBadLevel = errors.New("not a log level (TRACE, DEBUG, INFO, WARNING, ERROR or FATAL)")

// String returns the level's name in capitals, e.g. "WARNING".
func (l LogLevel) String() string {
	if l.valid() {
		return levelNames[l]
	}
	return fmt.Sprintf("LogLevel(%d)", int8(l))
}

func (l LogLevel) valid() bool { return l >= LevelTrace && l <= LevelFatal }

// ParseLogLevel reads a level name, in any case; "WARN" is accepted for
// WARNING.
func ParseLogLevel(s string) (LogLevel, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	if u == "WARN" {
		return LevelWarning, nil
	}
	for i, n := range levelNames {
		if u == n {
			return LogLevel(i), nil
		}
	}
	return 0, errBadLevel
}
