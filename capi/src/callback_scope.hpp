#pragma once
// Which handles' callbacks the calling thread is running (docs/c-api.md, "Callbacks"). Some calls cannot work from
// a handle's own callbacks: its destroy waits for the callback in progress to return, and a wait for a version waits
// for an apply that cannot happen while the callback runs. Such a call, made from there, is refused with a status
// and its reason instead of ending the process (a thread joining itself) or hanging it (a thread joining the one
// that waits for it).
namespace wsync::capi {

class CallbackScope {
 public:
  // The calling thread runs callback `name` (a static string: "pause", "withdraw") of `handle` until the scope
  // ends. Scopes nest, one per callback the thread is inside.
  CallbackScope(const void* handle, const char* name) noexcept;
  ~CallbackScope();
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

  // The name of a callback of `handle` that the calling thread is inside, or nullptr.
  static const char* runningFor(const void* handle) noexcept;

 private:
  const void* handle_;
  const char* name_;
  const CallbackScope* outer_;  // the scope this one nests in, or nullptr
};

}  // namespace wsync::capi
