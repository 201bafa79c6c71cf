import Flux

final class CountryStore: @unchecked Sendable {  // touched only inside dispatches
    var name = "?"
    var token: DispatchToken?
}

let dispatcher = Dispatcher<String>()
let country = CountryStore()
dispatcher.register { [unowned dispatcher] action in  // registered first ...
    try dispatcher.waitFor([country.token!])  // ... but runs after the country store
    print("city for", country.name)
}
country.token = dispatcher.register { action in country.name = action }
try dispatcher.dispatch("australia")  // prints "city for australia"
