package wake

import (
	"encoding/base64"
	"strconv"
	"strings"
	"unicode/utf8"
)

// On Postgres every wake and notification travels on one LISTEN channel
// (so no statement has to build a channel identifier at run time); the
// payload says what it is:
//
//	w<topic>                        a wake for topic
//	n<len>:<channel>t<text>         a notification whose payload is UTF-8 text
//	n<len>:<channel>b<base64>       a notification with a binary payload
//	n<len>:<channel>                a notification with a nil payload (an
//	                                empty one is t with no text)

// MaxPayload is Postgres's limit on a NOTIFY payload, envelope included:
// the store refuses a notification whose encoding is longer.
const MaxPayload = 7999

// EncodeWake is the NOTIFY payload that wakes topic.
func EncodeWake(topic string) string { return "w" + topic }

// EncodeNotification is the NOTIFY payload carrying a notification. It may
// be longer than MaxPayload; the caller checks.
func EncodeNotification(channel string, payload []byte) string {
	var b strings.Builder
	b.WriteString("n")
	b.WriteString(strconv.Itoa(len(channel)))
	b.WriteString(":")
	b.WriteString(channel)
	switch {
	case payload == nil: // nothing more: nil stays nil, apart from empty
	case utf8.Valid(payload) && !strings.ContainsRune(string(payload), 0):
		b.WriteString("t")
		b.Write(payload)
	default:
		b.WriteString("b")
		b.WriteString(base64.StdEncoding.EncodeToString(payload))
	}
	return b.String()
}

// dispatch hands one NOTIFY payload to the hub.
func dispatch(h *Hub, payload string) {
	switch {
	case strings.HasPrefix(payload, "w"):
		h.Wake(payload[1:])
	case strings.HasPrefix(payload, "n"):
		n, rest, ok := strings.Cut(payload[1:], ":")
		size, err := strconv.Atoi(n)
		if !ok || err != nil || size < 0 || size > len(rest) { // "n-1:" would panic
			return
		}
		channel, body := rest[:size], rest[size:]
		switch {
		case body == "":
			h.Deliver(channel, nil)
		case strings.HasPrefix(body, "t"):
			h.Deliver(channel, []byte(body[1:]))
		case strings.HasPrefix(body, "b"):
			if data, err := base64.StdEncoding.DecodeString(body[1:]); err == nil {
				h.Deliver(channel, data)
			}
		}
	}
}
