# The two commands a newcomer needs:
#   make demo   - start a simulated Talos cluster and run examples/site.yml against it
#                 (make demo BACKEND=real: every control plane runs real etcd and Kubernetes)
#   make test   - every test: Rust unit/golden tests, then ansible-playbook against the installed collection
.PHONY: demo test lint build
BACKEND ?= model
demo:
	tools/demo --backend $(BACKEND)
test:
	tools/test
lint:
	tools/lint
build:
	tools/setup-python
	collection/build
