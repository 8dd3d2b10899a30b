// Refuses plugin files that another local user could have replaced: a plugin runs with the
// full rights of every job that loads it.
//
// What "could have replaced" covers is every way the path leads to the file, not only the file
// and the directory named: the path is resolved here one component at a time, as the kernel
// resolves it, and each directory passed through is checked, as is each symbolic link followed
// and the file it ends at. So a link from a safe directory into a world-writable one, a safe
// directory inside a world-writable one (whose owner-less entries anyone may rename), and a file
// or directory owned by another user are all refused, naming the path at fault.
//
// The rules:
//   - no directory passed through is writable by others (world-writable) unless it is sticky
//     (like /tmp: others may add entries there but not rename or remove ours);
//   - a symbolic link followed inside a world-writable sticky directory belongs to root or to
//     this user (anyone could have planted it there);
//   - the file is a regular file, not writable by others, and both it and the directory holding
//     it belong to root or to this user (their owner can replace them whatever the modes say).
// Group-writable directories are accepted: a group is a grant an administrator made (Debian's
// /usr/local is writable by group staff), not "others".
#include "plugin_host/permissions.hpp"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <system_error>
#include <vector>

#include "plexus/core/errors.hpp"

namespace plexus::detail {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxLinks = 40;  // as the kernel's ELOOP limit

constexpr const char* kHint =
    "; fix it (chmod o-w, chown) or, if this is intended, allow it explicitly with "
    "--allow-world-writable-plugins or the config key plugins.allow_world_writable";

std::string user_text(uid_t uid) {
  std::string text = "uid " + std::to_string(uid);
  if (const struct passwd* pw = ::getpwuid(uid); pw != nullptr && pw->pw_name != nullptr)
    text = std::string(pw->pw_name) + " (" + text + ")";
  return text;
}

bool owned_by_root_or_me(const struct stat& info) {
  return info.st_uid == 0 || info.st_uid == ::geteuid();
}
bool writable_by_others(const struct stat& info) {
  return (info.st_mode & S_IWOTH) != 0;
}
bool sticky(const struct stat& info) {
  return (info.st_mode & S_ISVTX) != 0;
}

class Walk {
 public:
  explicit Walk(const fs::path& file) : file_(file) {
    std::error_code ec;
    absolute_ = fs::absolute(file_, ec);
    if (ec) refuse("cannot resolve its path: " + ec.message());
    parent_ = absolute_.parent_path();
  }

  void run() {
    std::error_code ec;
    std::vector<std::string> pending;  // components still to resolve, the next one last
    push_components(absolute_, pending);
    fs::path current = "/";
    struct stat current_info = check_directory(current);
    int links = 0;
    while (!pending.empty()) {
      const std::string part = std::move(pending.back());
      pending.pop_back();
      if (part.empty() || part == ".") continue;
      if (part == "..") {  // current is a resolved directory, so its parent was passed through
        current = current.parent_path();
        current_info = stat_of(current, false);
        continue;
      }
      const fs::path next = current / part;
      const struct stat info = stat_of(next, true);
      if (S_ISLNK(info.st_mode)) {
        if (++links > kMaxLinks) refuse("too many levels of symbolic links");
        if (writable_by_others(current_info) && !owned_by_root_or_me(info))
          refuse("the symbolic link '" + next.string() + "' in the world-writable directory '" +
                 current.string() + "' belongs to " + user_text(info.st_uid) + ", not to root or to you");
        fs::path target = fs::read_symlink(next, ec);
        if (ec) refuse("cannot read the symbolic link '" + next.string() + "': " + ec.message());
        links_.push_back(next.string() + " -> " + target.string());
        if (target.is_absolute()) {
          current = "/";
          current_info = check_directory(current);
        }
        push_components(target, pending);
        continue;
      }
      if (pending.empty()) {  // the last component: the file itself, in `current`
        check_file(next, info, current, current_info);
        return;
      }
      if (!S_ISDIR(info.st_mode)) refuse('\'' + next.string() + "' is not a directory");
      current = next;
      current_info = check_directory(current);
    }
    refuse("its path names no file");
  }

 private:
  // Appends path's components so that its first is popped first.
  static void push_components(const fs::path& path, std::vector<std::string>& pending) {
    std::vector<std::string> parts;
    for (const fs::path& part : path.relative_path()) parts.push_back(part.string());
    pending.insert(pending.end(), parts.rbegin(), parts.rend());
  }

  struct stat stat_of(const fs::path& path, bool no_follow) const {
    struct stat info {};
    if ((no_follow ? ::lstat(path.c_str(), &info) : ::stat(path.c_str(), &info)) != 0)
      refuse("cannot inspect '" + path.string() +
             "': " + std::error_code(errno, std::generic_category()).message());
    return info;
  }

  struct stat check_directory(const fs::path& dir) const {
    const struct stat info = stat_of(dir, false);
    if (writable_by_others(info) && !sticky(info))
      refuse(dir == parent_ ? "its directory '" + dir.string() + "' is writable by others"
                            : "the directory '" + dir.string() + "' on its path is writable by others");
    return info;
  }

  void check_file(const fs::path& resolved, const struct stat& info, const fs::path& dir,
                  const struct stat& dir_info) {
    resolved_ = resolved;
    if (!S_ISREG(info.st_mode)) refuse("not a regular file");
    if (writable_by_others(info)) refuse("the file is writable by others");
    if (!owned_by_root_or_me(info))
      refuse("the file belongs to " + user_text(info.st_uid) +
             ", not to root or to you (you: " + user_text(::geteuid()) + ")");
    if (!owned_by_root_or_me(dir_info))
      refuse("its directory '" + dir.string() + "' belongs to " + user_text(dir_info.st_uid) +
             ", not to root or to you (you: " + user_text(::geteuid()) + ")");
  }

  [[noreturn]] void refuse(const std::string& why) const {
    std::string name =
        '\'' + file_.string() + '\'';  // chars, not "'": GCC 12's -Wrestrict (PlexusWarnings.cmake)
    if (!resolved_.empty() && resolved_ != absolute_.lexically_normal())
      name += " (resolved: " + resolved_.string() + ")";
    if (!links_.empty()) {
      name += links_.size() == 1 ? " through the symbolic link " : " through the symbolic links ";
      for (std::size_t i = 0; i < links_.size(); ++i) name += (i == 0 ? "" : ", ") + links_[i];
    }
    throw PluginError(file_.string(), "refusing to load plugin " + name + ": " + why + kHint);
  }

  fs::path file_;
  fs::path absolute_;
  fs::path parent_;
  fs::path resolved_;
  std::vector<std::string> links_;  // "link -> target", each followed, for the message
};

}  // namespace

void check_not_world_writable(const std::filesystem::path& file) {
  Walk(file).run();
}

}  // namespace plexus::detail
