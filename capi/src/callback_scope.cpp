#include "callback_scope.hpp"

namespace wsync::capi {

namespace {

// Per thread: a callback runs on one of its agent's threads, and only that thread may not make the forbidden calls.
// The scopes live on that thread's stack, innermost first.
thread_local const CallbackScope* innermost = nullptr;

}  // namespace

CallbackScope::CallbackScope(const void* handle, const char* name) noexcept
    : handle_(handle), name_(name), outer_(innermost) {
  innermost = this;
}

CallbackScope::~CallbackScope() { innermost = outer_; }

const char* CallbackScope::runningFor(const void* handle) noexcept {
  for (const CallbackScope* scope = innermost; scope != nullptr; scope = scope->outer_) {
    if (handle != nullptr && scope->handle_ == handle) return scope->name_;
  }
  return nullptr;
}

}  // namespace wsync::capi
