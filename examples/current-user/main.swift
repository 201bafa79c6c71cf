// JBFlux's own example in Swift (make demo): a CurrentUserStore refreshed by
// a "current user refreshed" action that may carry an error, a MessagesStore
// that waits for it, and a view bound to both for as long as it lives.
// The Python twin is examples/current_user.py.
import Flux

struct User: Sendable, Equatable { let name: String; let unread: Int }
struct RefreshFailed: Error, CustomStringConvertible { var description: String { "the server did not answer" } }

/// JBFlux routes action names to methods; Swift has an enum and a switch.
enum AppAction: Sendable {
    case currentUserRefreshed(Result<User, RefreshFailed>)
    case messageRead
}

final class CurrentUserStore: RegisteredStore {
    let users: ReduceStore<User?, AppAction>

    init(dispatcher: Dispatcher<AppAction>) {
        let box = StoreBox<User?>()
        users = ReduceStore(dispatcher: dispatcher, initialState: nil) { user, action in
            guard case .currentUserRefreshed(let result) = action else { return user }
            switch result {
            case .success(let fresh): return fresh
            case .failure(let error):
                // JBFlux's emitChangeWithError: listeners run and see the error.
                try box.store?.emitChange(error: error)
                return nil
            }
        }
        box.store = users
    }

    var dispatchToken: DispatchToken { users.dispatchToken }
}

final class MessagesStore: RegisteredStore {
    let unread: ReduceStore<Int, AppAction>

    init(dispatcher: Dispatcher<AppAction>) {
        // A dependency, registered (once) from here.
        let current = dispatcher.registerStore(CurrentUserStore.self)
        unread = ReduceStore(dispatcher: dispatcher, initialState: 0) { [unowned dispatcher] count, action in
            switch action {
            case .currentUserRefreshed:
                try dispatcher.waitFor([current.dispatchToken])  // the user is up to date now
                return current.users.state?.unread ?? 0
            case .messageRead:
                return max(0, count - 1)
            }
        }
    }

    var dispatchToken: DispatchToken { unread.dispatchToken }
}

/// A reference to a store made inside its own reduce closure.
final class StoreBox<State>: @unchecked Sendable { weak var store: ReduceStore<State, AppAction>? }

/// A view: bound to the stores for its life, no unregister anywhere.
final class ProfileView: Sendable {
    let name: String
    init(name: String, dispatcher: Dispatcher<AppAction>) {
        self.name = name
        let users = dispatcher.store(CurrentUserStore.self)!.users
        let messages = dispatcher.store(MessagesStore.self)!.unread
        users.addListener(owner: self) { view in
            if let error = users.error {
                print("  \(view.name): could not refresh: \(error)")
            } else {
                print("  \(view.name): signed in as \(users.state?.name ?? "nobody")")
            }
        }
        messages.addListener(owner: self) { view in print("  \(view.name): \(messages.state) unread") }
    }
    deinit { print("  \(name) closed") }
}

let dispatcher = Dispatcher<AppAction>()
dispatcher.registerStore(CurrentUserStore.self)
dispatcher.registerStore(MessagesStore.self)

var view: ProfileView? = ProfileView(name: "profile view", dispatcher: dispatcher)
print("current user refreshed:")
try dispatcher.dispatch(.currentUserRefreshed(.success(User(name: "ada", unread: 3))))
print("a message read:")
try dispatcher.dispatch(.messageRead)
print("refresh failed:")
try dispatcher.dispatch(.currentUserRefreshed(.failure(RefreshFailed())))
view = nil
print("after the view closed, refreshed again (no view prints):")
try dispatcher.dispatch(.currentUserRefreshed(.success(User(name: "ada", unread: 1))))
print("messages: \(dispatcher.store(MessagesStore.self)!.unread.state) unread")
dispatcher.removeAllStores()
