module github.com/impulse-agent/impulse-agent

go 1.26.8
